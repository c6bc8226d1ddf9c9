/* Errors travel up as return values (0 = ok, -1 = failed); the human-readable reason lives
 * in a thread-local buffer, like dlerror(). Library code never exits or prints.
 *
 *   if (gguf_open(&f, path) != 0) { fprintf(stderr, "cinder: %s\n", cd_errmsg()); return 1; }
 */
#pragma once

#if defined(__GNUC__)
#define CD_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CD_PRINTF(a, b)
#endif

/* Sets the message and returns -1, so `return cd_fail("bad magic %x", m);` reads naturally. */
int cd_fail(const char *fmt, ...) CD_PRINTF(1, 2);
/* Prefixes the current message with context: "loading x.gguf: " + previous reason. */
int cd_fail_ctx(const char *fmt, ...) CD_PRINTF(1, 2);
const char *cd_errmsg(void);
void cd_errclear(void);

/* Returns -1 from the enclosing function when x (a call that failed with cd_fail) is non-zero:
 * `CD_TRY(a(x) || b(x));` in set-up code that chains many steps. */
#define CD_TRY(x)                                                                                                      \
    do {                                                                                                               \
        if (x) return -1;                                                                                              \
    } while (0)
