/* The one key encoding (runtime/base/key_encode.h) that the fingerprint, the prefix cache's
 * namespaces, the disk chain and the code id hash: the bytes each call feeds, written out from
 * the encoding's definition (8-byte little-endian lengths and numbers), so a change of layout or
 * byte order, which would silently orphan every cache on disk, fails here; and no two different
 * field lists feed the same bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <string.h>

#include "runtime/base/key_encode.h"
#include "tests/test_status.h"

typedef struct sink {
    uint8_t b[256];
    size_t n;
} sink;

static void capture(void *h, const void *p, size_t n) {
    sink *s = h;
    assert_true(s->n + n <= sizeof s->b);
    memcpy(s->b + s->n, p, n);
    s->n += n;
}

static void test_field_layout(void **state) {
    (void)state;
    sink s = {0};
    cd_key_field(capture, &s, "ab", "xyz", 3);
    const uint8_t want[] = {2, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 3, 0, 0, 0, 0, 0, 0, 0, 'x', 'y', 'z'};
    assert_int_equal(s.n, sizeof want);
    assert_memory_equal(s.b, want, sizeof want);
}

static void test_numbers_little_endian(void **state) {
    (void)state;
    sink s = {0};
    cd_key_u64(capture, &s, "n", 0x0102030405060708ull);
    cd_key_u32(capture, &s, "m", 0x0a0b0c0du);
    const uint8_t want[] = {1, 0, 0, 0, 0, 0, 0, 0, 'n', 8, 0,   0, 0, 0, 0, 0, 0, 8, 7, 6,    5,    4,    3,
                            2, 1, 1, 0, 0, 0, 0, 0, 0,   0, 'm', 4, 0, 0, 0, 0, 0, 0, 0, 0x0d, 0x0c, 0x0b, 0x0a};
    assert_int_equal(s.n, sizeof want);
    assert_memory_equal(s.b, want, sizeof want);
    sink f = {0};
    cd_key_f64(capture, &f, "d", 1.0); /* 0x3ff0000000000000 */
    const uint8_t one[] = {1, 0, 0, 0, 0, 0, 0, 0, 'd', 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f};
    assert_memory_equal(f.b, one, sizeof one);
    sink r = {0};
    cd_key_le64(capture, &r, 258);
    cd_key_le32(capture, &r, 258);
    const uint8_t raw[] = {2, 1, 0, 0, 0, 0, 0, 0, 2, 1, 0, 0};
    assert_int_equal(r.n, sizeof raw);
    assert_memory_equal(r.b, raw, sizeof raw);
}

/* "ab" + "c" and "a" + "bc", an empty value and a missing field: all feed different bytes */
static void test_no_aliasing(void **state) {
    (void)state;
    sink a = {0}, b = {0}, c = {0}, d = {0};
    cd_key_field(capture, &a, "ab", "c", 1);
    cd_key_field(capture, &b, "a", "bc", 2);
    cd_key_field(capture, &c, "abc", "", 0);
    cd_key_bytes(capture, &d, "abc", 3);
    assert_false(a.n == b.n && !memcmp(a.b, b.b, a.n));
    assert_false(a.n == c.n && !memcmp(a.b, c.b, a.n));
    assert_false(c.n == d.n && !memcmp(c.b, d.b, c.n));
    assert_int_equal(c.n, 8 + 3 + 8); /* an empty value is its length alone */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_field_layout),
        cmocka_unit_test(test_numbers_little_endian),
        cmocka_unit_test(test_no_aliasing),
    };
    return tu_status(cmocka_run_group_tests(tests, NULL, NULL));
}
