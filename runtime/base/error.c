#include "runtime/base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char err_buf[1024];

int cd_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    return -1;
}

int cd_fail_ctx(const char *fmt, ...) {
    char prev[sizeof err_buf];
    memcpy(prev, err_buf, sizeof prev);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof err_buf) snprintf(err_buf + n, sizeof err_buf - (size_t)n, "%s", prev);
    return -1;
}

const char *cd_errmsg(void) { return err_buf[0] ? err_buf : "unknown error"; }
void cd_errclear(void) { err_buf[0] = 0; }
