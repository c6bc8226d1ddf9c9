/* Page events and their wire format without a device (fast under ASan; tests/kv_events.sh runs
 * the whole stream through cinder serve in the release run only): random prompts committed to a
 * prefix cache over a small pool and reclaimed, an index built from the events alone against the
 * tree's own listing after every step; a salted namespace never announced; the msgpack encoding
 * decoded field by field; endpoint syntax. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "kv/prefix_cache.h"
#include "runtime/base/rng.h"
#include "server/kv_wire.h"

#define PT 4
#define MAX_H 4096

/* The router's side: a set of (hash, medium) from the events; the wire batch too. */
typedef struct index_ {
    uint64_t h[MAX_H];
    uint8_t m[MAX_H];
    uint32_t n;
    kv_wire_batch wire;
} index_;

static int find(const index_ *x, uint64_t h, uint8_t m) {
    for (uint32_t i = 0; i < x->n; i++)
        if (x->h[i] == h && x->m[i] == m) return (int)i;
    return -1;
}

static void on_event(void *ctx, const kv_event *ev) {
    index_ *x = ctx;
    kv_wire_append(&x->wire, ev);
    if (ev->kind == KV_EVENT_CLEARED) {
        x->n = 0;
        return;
    }
    for (uint32_t i = 0; i < ev->n; i++) {
        int at = find(x, ev->hashes[i], (uint8_t)ev->medium);
        if (ev->kind == KV_EVENT_STORED) {
            assert_int_equal(at, -1);
            uint64_t parent = i ? ev->hashes[i - 1] : ev->parent;
            assert_true(parent == 0 || find(x, parent, KV_MEDIUM_GPU) >= 0); /* the parent resolves */
            assert_true(ev->hashes[i] < (UINT64_C(1) << 63));
            x->h[x->n] = ev->hashes[i], x->m[x->n++] = (uint8_t)ev->medium;
        } else {
            assert_true(at >= 0); /* removal by the engine's key: it was there */
            x->h[at] = x->h[--x->n], x->m[at] = x->m[x->n];
        }
    }
}

typedef struct listed {
    const index_ *x;
    uint32_t n;
} listed;

static void on_listed(void *ctx, uint64_t h, kv_medium m) {
    listed *l = ctx;
    assert_true(find(l->x, h, (uint8_t)m) >= 0);
    l->n++;
}

static void mirror_equals_tree(kv_prefix_cache *c, const index_ *x) {
    listed l = {.x = x};
    assert_int_equal(kv_cache_list_pages(c, on_listed, &l), 0);
    assert_int_equal(l.n, x->n);
}

static void test_mirror_random(void **state) {
    (void)state;
    kv_pages pool;
    assert_int_equal(kv_pages_init(&pool, 48, PT), 0);
    uint8_t ns[RADIX_NS_BYTES] = {1}, salted[RADIX_NS_BYTES] = {2};
    kv_prefix_cache c;
    assert_int_equal(kv_cache_init(&c, &pool, ns), 0);
    static index_ x;
    memset(&x, 0, sizeof x);
    assert_int_equal(kv_cache_set_events(&c, on_event, &x), 0);
    assert_int_equal(x.wire.n_ev, 1); /* cleared first */
    rng r;
    rng_seed(&r, 2026);
    int32_t ids[64];
    for (int step = 0; step < 400; step++) {
        uint32_t n = 2 + (uint32_t)rng_u64(&r) % 40;
        uint32_t family = (uint32_t)rng_u64(&r) % 5; /* shared prefixes: five families */
        for (uint32_t i = 0; i < n; i++) ids[i] = (int32_t)(i < 12 ? family * 100 + i : (uint32_t)rng_u64(&r) % 7);
        if (kv_pages_free_count(&pool) < kv_pages_for(&pool, n)) kv_cache_reclaim(&c, kv_pages_for(&pool, n));
        kv_seq s;
        kv_seq_init(&s);
        if (kv_seq_append(&pool, &s, n, NULL) == 0) {
            bool salt = (uint32_t)rng_u64(&r) % 8 == 0;
            assert_int_equal(kv_cache_commit(&c, salt ? salted : NULL, ids, n, &s, KV_COMMIT_FINAL, NULL), 0);
        }
        kv_seq_free(&pool, &s);
        mirror_equals_tree(&c, &x);
    }
    kv_cache_clear(&c);
    assert_int_equal(x.n, 0); /* every announced page removed */
    kv_wire_free(&x.wire);
    kv_cache_free(&c);
    kv_pages_free(&pool);
}

static const msgpack_object *at(const msgpack_object *o, uint32_t i) {
    assert_int_equal(o->type, MSGPACK_OBJECT_ARRAY);
    assert_true(i < o->via.array.size);
    return &o->via.array.ptr[i];
}

static void is_str(const msgpack_object *o, const char *s) {
    assert_int_equal(o->type, MSGPACK_OBJECT_STR);
    assert_int_equal(o->via.str.size, strlen(s));
    assert_memory_equal(o->via.str.ptr, s, strlen(s));
}

/* A batch of every event kind: cleared, two GPU pages stored, the second stored in the CPU (its
 * parent the first), the first removed from the CPU. */
static kv_wire_batch sample_batch(void) {
    kv_wire_batch b = {0};
    uint64_t h[2] = {(UINT64_C(1) << 63) - 1, 7};
    int32_t tok[2 * PT] = {1, 2, 3, 4, 5, 6, 7, 151643};
    kv_wire_append(&b, &(kv_event){.kind = KV_EVENT_CLEARED, .page_tokens = PT});
    kv_wire_append(
        &b,
        &(kv_event){
            .kind = KV_EVENT_STORED, .medium = KV_MEDIUM_GPU, .n = 2, .hashes = h, .tokens = tok, .page_tokens = PT});
    kv_wire_append(&b,
                   &(kv_event){.kind = KV_EVENT_STORED,
                               .medium = KV_MEDIUM_CPU,
                               .n = 1,
                               .hashes = h + 1,
                               .parent = h[0],
                               .tokens = tok + PT,
                               .page_tokens = PT});
    kv_wire_append(
        &b, &(kv_event){.kind = KV_EVENT_REMOVED, .medium = KV_MEDIUM_CPU, .n = 1, .hashes = h, .page_tokens = PT});
    b.ts = 1.5;
    return b;
}

/* b encoded (events as maps or arrays), unpacked into u: the batch object. */
static const msgpack_object *encode(const kv_wire_batch *b, bool map, msgpack_sbuffer *sb, msgpack_unpacked *u) {
    msgpack_sbuffer_init(sb);
    assert_int_equal(kv_wire_encode(b, map, sb), 0);
    msgpack_unpacked_init(u);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(u, sb->data, sb->size, &off), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(off, sb->size);
    return &u->data;
}

static void test_wire_encoding(void **state) {
    (void)state;
    kv_wire_batch b = sample_batch();
    uint64_t h0 = (UINT64_C(1) << 63) - 1;
    msgpack_sbuffer sb;
    msgpack_unpacked u;
    const msgpack_object *batch = encode(&b, false, &sb, &u), *ev = at(batch, 1);
    assert_int_equal(batch->via.array.size, 3);
    assert_int_equal(at(batch, 0)->type, MSGPACK_OBJECT_FLOAT64);
    assert_true(at(batch, 0)->via.f64 == 1.5);
    assert_int_equal(at(batch, 2)->via.u64, 0);
    assert_int_equal(ev->via.array.size, 4);
    assert_int_equal(at(ev, 0)->via.array.size, 1);
    is_str(at(at(ev, 0), 0), "AllBlocksCleared");
    const msgpack_object *st = at(ev, 1);
    assert_int_equal(st->via.array.size, 7);
    is_str(at(st, 0), "BlockStored");
    assert_int_equal(at(st, 1)->via.array.size, 2);
    assert_true(at(at(st, 1), 0)->via.u64 == h0);
    assert_int_equal(at(st, 2)->type, MSGPACK_OBJECT_NIL);
    assert_int_equal(at(st, 3)->via.array.size, 2 * PT);
    assert_int_equal(at(at(st, 3), 7)->via.u64, 151643);
    assert_int_equal(at(st, 4)->via.u64, PT);
    assert_int_equal(at(st, 5)->type, MSGPACK_OBJECT_NIL);
    is_str(at(st, 6), "GPU");
    assert_true(at(at(ev, 2), 2)->via.u64 == h0);
    is_str(at(at(ev, 2), 6), "CPU");
    const msgpack_object *rm = at(ev, 3);
    assert_int_equal(rm->via.array.size, 3);
    is_str(at(rm, 0), "BlockRemoved");
    is_str(at(rm, 2), "CPU");
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
    kv_wire_free(&b);
}

/* The map encoding: every event a map whose first key is "type" (the tag) and whose other keys
 * are vLLM's field names in order, each value the array encoding's element at that position. */
static void test_wire_map_encoding(void **state) {
    (void)state;
    kv_wire_batch b = sample_batch();
    msgpack_sbuffer sa, sm;
    msgpack_unpacked ua, um;
    const msgpack_object *arr = encode(&b, false, &sa, &ua), *map = encode(&b, true, &sm, &um);
    assert_int_equal(map->via.array.size, 3);
    assert_true(msgpack_object_equal(*at(map, 0), *at(arr, 0)));
    assert_true(msgpack_object_equal(*at(map, 2), *at(arr, 2)));
    const char *stored[] = {"type",    "block_hashes", "parent_block_hash", "token_ids", "block_size",
                            "lora_id", "medium"};
    const char *removed[] = {"type", "block_hashes", "medium"};
    const msgpack_object *ea = at(arr, 1), *em = at(map, 1);
    assert_int_equal(em->via.array.size, ea->via.array.size);
    for (uint32_t i = 0; i < ea->via.array.size; i++) {
        const msgpack_object *a = at(ea, i), *m = at(em, i);
        assert_int_equal(m->type, MSGPACK_OBJECT_MAP);
        assert_int_equal(m->via.map.size, a->via.array.size);
        const msgpack_object *tag = at(a, 0);
        bool is_stored = tag->via.str.size == 11 && !memcmp(tag->via.str.ptr, "BlockStored", 11);
        bool is_removed = tag->via.str.size == 12 && !memcmp(tag->via.str.ptr, "BlockRemoved", 12);
        for (uint32_t k = 0; k < m->via.map.size; k++) {
            is_str(&m->via.map.ptr[k].key, is_stored ? stored[k] : is_removed ? removed[k] : "type");
            assert_true(msgpack_object_equal(m->via.map.ptr[k].val, *at(a, k)));
        }
    }
    msgpack_unpacked_destroy(&ua);
    msgpack_unpacked_destroy(&um);
    msgpack_sbuffer_destroy(&sa);
    msgpack_sbuffer_destroy(&sm);
    kv_wire_free(&b);
}

static void test_endpoints(void **state) {
    (void)state;
    bool bind = false;
    assert_int_equal(kv_wire_endpoint("--kv-events", "tcp://*:5557", &bind), 0);
    assert_true(bind);
    assert_int_equal(kv_wire_endpoint("--kv-events", "tcp://0.0.0.0:1", &bind), 0);
    assert_true(bind);
    assert_int_equal(kv_wire_endpoint("--kv-events", "tcp://[::]:1", &bind), 0);
    assert_true(bind);
    assert_int_equal(kv_wire_endpoint("--kv-events", "tcp://indexer.ns.svc:5557", &bind), 0);
    assert_false(bind);
    assert_int_equal(kv_wire_endpoint("--kv-events", "tcp://[fe80::1]:9", &bind), 0);
    assert_false(bind);
    const char *bad[] = {"udp://x:1",  "tcp://x",     "tcp://:1", "tcp://x:0", "tcp://x:65536",
                         "tcp://x:1a", "tcp://a b:1", "tcp://x:", "ipc://",    ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(kv_wire_endpoint("--kv-events", bad[i], &bind), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_mirror_random), cmocka_unit_test(test_wire_encoding),
                                       cmocka_unit_test(test_wire_map_encoding), cmocka_unit_test(test_endpoints)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
