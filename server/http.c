#include "server/http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/base/error.h"

/* ---- replies ---- */

/* Room for more bytes and a NUL after len (doubling); -1 when out of memory. */
static int buf_reserve(char **out, size_t len, size_t *cap, size_t more) {
    if (len + more + 1 <= *cap) return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < len + more + 1) c *= 2;
    char *p = realloc(*out, c);
    if (!p) return -1;
    *out = p;
    *cap = c;
    return 0;
}

int buf_printf(char **out, size_t *len, size_t *cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || buf_reserve(out, *len, cap, (size_t)n)) return -1;
    va_start(ap, fmt);
    vsnprintf(*out + *len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    *len += (size_t)n;
    return 0;
}

enum MHD_Result http_text(struct MHD_Connection *c, unsigned status, const char *type, char *text) {
    if (!text) return MHD_NO; /* out of memory: drop the connection rather than lie */
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

enum MHD_Result http_json(struct MHD_Connection *c, unsigned status, json_t *body) {
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return http_text(c, status, "application/json", s);
}

static const char *error_type(unsigned status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 500: return "server_error";
    case 503: return "unavailable_error";
    default: return "invalid_request_error";
    }
}

enum MHD_Result http_error(struct MHD_Connection *c, unsigned status, const char *param, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:{s:s, s:s, s:o, s:n}}", "error", "message", msg, "type", error_type(status), "param",
                          param ? json_string(param) : json_null(), "code");
    return http_json(c, status, e);
}

/* ---- Server-Sent Events ---- */

typedef struct sse {
    http_stream st;
    char *buf;
    size_t len, cap, pos;
    bool ended;
} sse;

static ssize_t sse_read(void *cls, uint64_t at, char *out, size_t max) {
    sse *x = cls;
    while (x->pos == x->len) {
        if (x->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        x->len = x->pos = 0;
        int rc = x->st.produce(x->st.ctx, &x->buf, &x->len, &x->cap);
        if (rc < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rc == 0) x->ended = true;
    }
    size_t n = x->len - x->pos < max ? x->len - x->pos : max;
    memcpy(out, x->buf + x->pos, n);
    x->pos += n;
    return (ssize_t)n;
}

static void sse_free(void *cls) {
    sse *x = cls;
    x->st.done(x->st.ctx);
    free(x->buf);
    free(x);
}

enum MHD_Result http_sse(struct MHD_Connection *c, http_stream st) {
    sse *x = calloc(1, sizeof *x);
    if (!x) {
        st.done(st.ctx);
        return MHD_NO;
    }
    x->st = st;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, x, sse_free);
    if (!r) {
        sse_free(x);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

bool http_client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    char b;
    return recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0; /* 0: orderly shutdown */
}

/* ---- requests ---- */

typedef struct conn_req { /* one request's body as it arrives */
    char *body;
    size_t len, cap;
    bool too_large;
} conn_req;

static bool append_body(conn_req *q, const char *data, size_t n, size_t limit) {
    if (q->too_large || q->len + n > limit) {
        q->too_large = true;
        return false;
    }
    if (buf_reserve(&q->body, q->len, &q->cap, n)) return false;
    memcpy(q->body + q->len, data, n);
    q->len += n;
    q->body[q->len] = 0;
    return true;
}

typedef enum MHD_Result (*handler_fn)(server *s, const http_req *r);
typedef struct route {
    const char *path, *method;
    handler_fn fn;
    bool open; /* answers without the API key */
} route;

static const route routes[] = {
    {"/v1/chat/completions", "POST", api_chat_completions, false},
    {"/chat/completions", "POST", api_chat_completions, false},
    {"/v1/completions", "POST", api_completions, false},
    {"/completions", "POST", api_completions, false},
    {"/v1/chat/completions/render", "POST", api_chat_render, false},
    {"/v1/completions/render", "POST", api_completions_render, false},
    {"/tokenize", "POST", api_tokenize_text, false},
    {"/detokenize", "POST", api_detokenize_ids, false},
    {"/v1/models", "GET", api_models, false},
    {"/models", "GET", api_models, false},
    {"/health", "GET", api_health, true},
    {"/metrics", "GET", api_metrics, false},
    {"/v1/cache", "GET", api_cache, false},
    {"/", "GET", api_page, true},
    {"/page/chat.css", "GET", api_page_css, true},
    {"/page/chat.js", "GET", api_page_js, true},
};

static bool authorized(const server *s, struct MHD_Connection *c) {
    if (!s->o.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    /* length first, then every byte: the time taken does not tell how much of a guess was right */
    size_t n = strlen(h + 7), m = strlen(s->o.api_key);
    unsigned diff = n != m;
    for (size_t i = 0; i < n && i < m; i++) diff |= (unsigned char)(h[7 + i] ^ s->o.api_key[i]);
    return diff == 0;
}

static enum MHD_Result dispatch(server *s, struct MHD_Connection *c, const char *url, const char *method, conn_req *q) {
    const route *hit = NULL;
    bool path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].path)) continue;
        path_known = true;
        if (!strcmp(method, routes[i].method)) hit = &routes[i];
    }
    if (!path_known) return http_error(c, 404, NULL, "no endpoint %s %s", method, url);
    if (!hit) return http_error(c, 405, NULL, "%s is not allowed on %s", method, url);
    if (!hit->open && !authorized(s, c))
        return http_error(c, 401, NULL, "a valid API key is required (Authorization: Bearer KEY)");
    if (q->too_large)
        return http_error(c, 413, NULL, "the request body is larger than %u KiB (--max-body-kb)", s->o.max_body_kb);
    http_req r = {.c = c, .method = method, .url = url, .body = q->body ? q->body : "", .len = q->len};
    return hit->fn(s, &r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *data_size, void **con_cls) {
    server *s = cls;
    if (!*con_cls) { /* headers only: set up for the body */
        conn_req *q = calloc(1, sizeof *q);
        if (!q) return MHD_NO;
        *con_cls = q;
        return MHD_YES;
    }
    conn_req *q = *con_cls;
    if (*data_size) { /* more body: keep it, up to the limit (the rest is read and dropped) */
        append_body(q, data, *data_size, (size_t)s->o.max_body_kb * 1024);
        *data_size = 0;
        return MHD_YES;
    }
    return dispatch(s, c, url, method, q);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    conn_req *q = *con_cls;
    if (!q) return;
    free(q->body);
    free(q);
    *con_cls = NULL;
}

static int resolve(const char *host, uint16_t port, struct sockaddr_storage *sa, bool *v6) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int rc = getaddrinfo(host, ps, &hints, &ai);
    if (rc) return cd_fail("--host %s: %s", host, gai_strerror(rc));
    memcpy(sa, ai->ai_addr, ai->ai_addrlen);
    *v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    return 0;
}

int http_start(server *s) {
    struct sockaddr_storage sa;
    bool v6 = false;
    if (resolve(s->o.host, s->o.port, &sa, &v6)) return -1;
    unsigned flags =
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | (v6 ? MHD_USE_IPv6 : 0);
    s->d =
        MHD_start_daemon(flags, s->o.port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->o.max_conns, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned)s->o.idle_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)s->o.max_header_kb * 1024,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    if (!s->d)
        return cd_fail("cannot listen on %s port %u (in use, or not an address of this machine)", s->o.host, s->o.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    if (di) s->o.port = di->port;
    return 0;
}

void http_quiesce(server *s) {
    if (!s->d) return;
    MHD_socket fd = MHD_quiesce_daemon(s->d); /* the listening socket is ours to close now */
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void http_stop(server *s) {
    if (s->d) MHD_stop_daemon(s->d);
    s->d = NULL;
}
