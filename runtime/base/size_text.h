/* A byte count as a person reads it, in messages and reports: GiB from 1 GiB, else MiB. */
#pragma once
#include <stdint.h>
#include <stdio.h>

static inline const char *cd_size_text(uint64_t n, char buf[32]) {
    if (n >= (1ull << 30)) snprintf(buf, 32, "%.2f GiB", (double)n / (1ull << 30));
    else snprintf(buf, 32, "%.1f MiB", (double)n / (1ull << 20));
    return buf;
}
