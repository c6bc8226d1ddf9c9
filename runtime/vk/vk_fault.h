/* Fault injection for tests (tests/test_oom.c), compiled into a test build only (CINDER_TESTS,
 * CMakeLists.txt): device-memory allocations and queue submissions fail as a driver would fail
 * them (VK_ERROR_OUT_OF_DEVICE_MEMORY, VK_ERROR_DEVICE_LOST), the N-th one after a test arms the
 * countdown. Process-wide and not thread-safe: a test's knob, off (< 0) unless a test sets it;
 * the counters count every call either way. Without the hooks both questions answer no. */
#pragma once
#include <stdbool.h>
#include <volk.h>

#ifndef CINDER_FAULT_INJECTION
static inline bool cvk_fault_alloc(void) { return false; }
static inline bool cvk_fault_submit(void) { return false; }
#else
typedef struct cvk_faults {
    long alloc_at, submit_at;      /* the call that fails when its countdown reaches 0; < 0: none */
    unsigned long allocs, submits; /* calls made (tests count a clean run with these) */
    bool hit;                      /* an injected failure happened */
} cvk_faults;

extern cvk_faults cvk_fault;

/* Whether this call fails (counting it in *n). */
static inline bool cvk_fault_take(long *at, unsigned long *n) {
    (*n)++;
    if (*at < 0) return false;
    if ((*at)-- == 0) return cvk_fault.hit = true;
    return false;
}

/* Whether this device-memory allocation (queue submission) fails. */
static inline bool cvk_fault_alloc(void) { return cvk_fault_take(&cvk_fault.alloc_at, &cvk_fault.allocs); }
static inline bool cvk_fault_submit(void) { return cvk_fault_take(&cvk_fault.submit_at, &cvk_fault.submits); }
#endif
