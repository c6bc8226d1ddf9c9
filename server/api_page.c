/* GET / (the chat page), /page/chat.css and /page/chat.js: the bytes cmake/embed_page.cmake
 * embedded from server/page/ (the script: marked, DOMPurify, then the page's own). The page talks
 * to this server's /v1/chat/completions only; the policy below holds it to that in the browser
 * (no inline script or style, no other origin, no frames, no forms), so a reply that smuggles
 * markup past the sanitizer still cannot run or send anything. */
#include <stddef.h>

#include "server/http.h"

extern const unsigned char cinder_page_html[], cinder_page_css[], cinder_page_js[];
extern const size_t cinder_page_html_size, cinder_page_css_size, cinder_page_js_size;

#define PAGE_POLICY                                                                                                    \
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "              \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static enum MHD_Result asset(const http_req *r, const unsigned char *bytes, size_t n, const char *type) {
    /* the bytes live as long as the program: nothing copied, nothing freed */
    struct MHD_Response *x = MHD_create_response_from_buffer(n, (void *)bytes, MHD_RESPMEM_PERSISTENT);
    if (!x) return MHD_NO;
    MHD_add_response_header(x, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(x, "Content-Security-Policy", PAGE_POLICY);
    MHD_add_response_header(x, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(x, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(x, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result rc = MHD_queue_response(r->c, MHD_HTTP_OK, x);
    MHD_destroy_response(x);
    return rc;
}

enum MHD_Result api_page(server *s, const http_req *r) {
    (void)s;
    return asset(r, cinder_page_html, cinder_page_html_size, "text/html; charset=utf-8");
}

enum MHD_Result api_page_css(server *s, const http_req *r) {
    (void)s;
    return asset(r, cinder_page_css, cinder_page_css_size, "text/css; charset=utf-8");
}

enum MHD_Result api_page_js(server *s, const http_req *r) {
    (void)s;
    return asset(r, cinder_page_js, cinder_page_js_size, "text/javascript; charset=utf-8");
}
