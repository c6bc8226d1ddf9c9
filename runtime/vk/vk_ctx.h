/* Everything a Vulkan user of cinder needs, created and freed in one place:
 *
 *   cvk_ctx *vk = calloc(1, sizeof *vk);       (it holds pointers into itself: never move it)
 *   cvk_ctx_opts o = {.device = -1, .pipeline_cache = ""};   "" = the default cache path
 *   if (cvk_ctx_init(vk, &o)) fail(cd_errmsg());
 *   ... cvk_buffer_create(&vk->mem, ...); cvk_stager_upload(&vk->stager, ...); cvk_stager_flush(...)
 *   ... cvk_rmsnorm_pipeline(&p, &vk->dev, vk->pcache.cache, 256);
 *   ... cvk_cmd_begin(&vk->cmd); cvk_rmsnorm(&vk->cmd, &vk->dpool, &p, &args); cvk_cmd_run(&vk->cmd);
 *   cvk_pcache_save(&vk->pcache);   (after creating pipelines; failures are not fatal)
 *   cvk_ctx_free(vk);
 *
 * The timer is attached to `cmd`, disabled; cvk_timer_enable(&vk->timer, true) to profile. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/vk/vk_cmd.h"
#include "runtime/vk/vk_descriptor.h"
#include "runtime/vk/vk_device.h"
#include "runtime/vk/vk_memory.h"
#include "runtime/vk/vk_pcache.h"
#include "runtime/vk/vk_stager.h"
#include "runtime/vk/vk_timer.h"

typedef struct cvk_ctx_opts {
    int device;                 /* -1: CINDER_DEVICE, then the automatic choice */
    const char *pipeline_cache; /* NULL: in memory only; "": cvk_pcache_default_path; else a path */
    uint64_t staging_bytes;     /* per staging slot; 0 = 64 MiB */
    uint32_t timer_spans;       /* 0 = 1024 */
    /* a compile-only device (vk_device.h, CVK_DEVICE_COMPILE_ONLY): only dev and pcache are set
     * up, for creating pipelines and reading their statistics; nothing can be run or uploaded */
    bool compile_only;
} cvk_ctx_opts;

typedef struct cvk_ctx {
    cvk_device dev;
    cvk_mem mem;
    cvk_pcache pcache;
    cvk_stager stager;
    cvk_cmd cmd; /* on the compute queue */
    cvk_descpool dpool;
    cvk_timer timer;
} cvk_ctx;

int cvk_ctx_init(cvk_ctx *x, const cvk_ctx_opts *o);
void cvk_ctx_free(cvk_ctx *x); /* waits for the device; does not save the pipeline cache */
