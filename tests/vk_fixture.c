#include "tests/vk_fixture.h"

#include <stdio.h>
#include <stdlib.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_instance.h"

cvk_ctx *vk;

int vk_setup(void **state) {
    (void)state;
    vk = calloc(1, sizeof *vk);
    if (!vk || cvk_ctx_init(vk, NULL)) {
        fprintf(stderr, "no Vulkan device: %s\n", cd_errmsg());
        return -1;
    }
    return 0;
}

int vk_teardown(void **state) {
    (void)state;
    cvk_ctx_free(vk);
    free(vk);
    vk = NULL;
    if (cvk_validation_errors()) {
        fprintf(stderr, "%llu Vulkan validation messages\n", (unsigned long long)cvk_validation_errors());
        return -1;
    }
    return 0;
}

static cvk_ctx *shared;

static void free_shared(void) {
    cvk_ctx_free(shared);
    free(shared);
    shared = NULL;
}

cvk_ctx *vk_shared(void) {
    if (vk) return vk; /* the group's device (vk_setup), when the binary has one open */
    if (shared) return shared;
    cvk_ctx *x = calloc(1, sizeof *x);
    if (!x) return cd_fail("out of memory"), NULL;
    if (cvk_ctx_init(x, NULL)) {
        free(x);
        return NULL;
    }
    shared = x;
    atexit(free_shared);
    return shared;
}

int vk_engine_init(engine *e, model *m, const engine_opts *o) {
    engine_opts on = *o;
    if (!on.device && !(on.device = vk_shared())) {
        *e = (engine){0}; /* engine_free after a failed init stays safe */
        return -1;
    }
    if (engine_init(e, m, &on)) return -1;
    return vk_poison(on.device, &e->pool.buf);
}

int vk_poison(cvk_ctx *x, const cvk_buffer *b) { /* on the context's own command stream, idle here */
    cvk_cmd *c = &x->cmd;
    return cvk_cmd_begin(c) || cvk_cmd_fill(c, cvk_view_whole(b), 0xffffffffu) || cvk_cmd_end(c) || cvk_cmd_run(c) ? -1
                                                                                                                   : 0;
}
