/* Fault injection for tests (tests/test_oom.c): device-memory allocations and queue submissions
 * fail as a driver would fail them (VK_ERROR_OUT_OF_DEVICE_MEMORY, VK_ERROR_DEVICE_LOST), the
 * N-th one after a test arms the countdown. Process-wide and not thread-safe: a test's knob,
 * off (< 0) unless a test sets it; the counters count every call either way. */
#pragma once
#include <stdbool.h>
#include <volk.h>

typedef struct cvk_faults {
    long alloc_at, submit_at;         /* the call that fails when its countdown reaches 0; < 0: none */
    unsigned long allocs, submits;    /* calls made (tests count a clean run with these) */
    bool hit;                         /* an injected failure happened */
} cvk_faults;

extern cvk_faults cvk_fault;

/* Whether this call fails (counting it in *n). */
static inline bool cvk_fault_take(long *at, unsigned long *n) {
    (*n)++;
    if (*at < 0) return false;
    if ((*at)-- == 0) return cvk_fault.hit = true;
    return false;
}
