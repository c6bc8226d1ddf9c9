#include "runtime/vk/vk_ctx.h"

#include <string.h>

int cvk_ctx_init(cvk_ctx *x, const cvk_ctx_opts *o) {
    memset(x, 0, sizeof *x);
    cvk_ctx_opts def = {.device = -1};
    if (!o) o = &def;
    if (cvk_device_open(&x->dev, o->device, o->compile_only ? CVK_DEVICE_COMPILE_ONLY : 0)) return -1;
    char path[4096];
    const char *cache = o->pipeline_cache;
    if (cache && !*cache) cache = cvk_pcache_default_path(&x->dev, path, sizeof path) ? NULL : path;
    if (o->compile_only) {
        if (!cvk_pcache_open(&x->pcache, &x->dev, NULL)) return 0;
        cvk_ctx_free(x);
        return -1;
    }
    if (cvk_mem_init(&x->mem, &x->dev) || cvk_pcache_open(&x->pcache, &x->dev, cache) ||
        cvk_stager_init(&x->stager, &x->dev, &x->mem, o->staging_bytes) || cvk_cmd_init(&x->cmd, &x->dev, false) ||
        cvk_descpool_init(&x->dpool, &x->dev, 0) ||
        cvk_timer_init(&x->timer, &x->dev, o->timer_spans ? o->timer_spans : 1024)) {
        cvk_ctx_free(x);
        return -1;
    }
    x->cmd.timer = &x->timer;
    x->dev.pcache = x->pcache.cache;
    return 0;
}

void cvk_ctx_free(cvk_ctx *x) {
    if (x->dev.dev && !x->dev.compile_only) vkDeviceWaitIdle(x->dev.dev); /* a null device has no queue to wait on */
    if (x->timer.dev) cvk_timer_free(&x->timer);
    if (x->dpool.dev) cvk_descpool_free(&x->dpool);
    cvk_cmd_free(&x->cmd);
    if (x->stager.dev) cvk_stager_free(&x->stager);
    x->dev.pcache = VK_NULL_HANDLE;
    /* pipelines compiled on first use since the last save (vk_pipeline.h), kept for the next start;
     * a failed save costs only time */
    if (x->pcache.dev && x->pcache.saved_built != cvk_pipeline_memo_built(&x->dev)) cvk_pcache_save(&x->pcache);
    if (x->pcache.dev) cvk_pcache_close(&x->pcache);
    if (x->mem.dev) cvk_mem_free(&x->mem);
    cvk_device_free(&x->dev);
    memset(x, 0, sizeof *x);
}
