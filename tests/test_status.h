/* Skips and the exit status of a cmocka test binary (test_util.c). A test binary's status is,
 * in this order: failed (1) when a test failed; failed when the Vulkan validation layer reported
 * anything (CINDER_VK_VALIDATION, set for every test by tests/CMakeLists.txt); TU_SKIP (ctest's
 * SKIP_RETURN_CODE: reported as skipped, never as passed) when a test called tu_skip; else 0.
 * A test that cannot run its checks calls tu_skip(reason...) instead of returning: the reason
 * goes to stderr, cmocka marks the test skipped, and the other tests of the binary still run. */
#pragma once

enum { TU_SKIP = 77 };
void tu_note_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define tu_skip(...)                                                                                                   \
    do {                                                                                                               \
        tu_note_skip(__VA_ARGS__);                                                                                     \
        skip();                                                                                                        \
    } while (0)
/* main's return value from cmocka_run_group_tests' (the number of failed tests). */
int tu_status(int failed);
