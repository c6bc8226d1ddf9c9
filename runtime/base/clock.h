/* A monotonic clock in milliseconds, for the timings the engine and the cache tiers report. */
#pragma once
#include <time.h>

static inline double cd_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
