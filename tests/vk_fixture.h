/* The Vulkan context shared by the tests of one test binary: cmocka group setup/teardown.
 * Teardown fails the group when the validation layer (CINDER_VK_VALIDATION=1) reported
 * anything, so API misuse fails tests even where lavapipe tolerates it. */
#pragma once
#include "tests/test_status.h" /* main returns tu_status(...): validation messages fail the binary */
#include "engine/engine.h"
#include "runtime/vk/vk_ctx.h"

extern cvk_ctx *vk;
int vk_setup(void **state);
int vk_teardown(void **state);

/* One device for all the engines a test binary makes (engine_opts.device): each pipeline is
 * compiled once in the binary, not once per engine (lavapipe compiles for seconds). The group's
 * `vk` while vk_setup has it open (engines made in its tests are freed before its teardown),
 * else one opened at the first call and freed at exit; NULL (and cd_errmsg) when none opens. */
cvk_ctx *vk_shared(void);
/* engine_init on vk_shared()'s device (o->device, when set, wins), its KV pool poisoned. */
int vk_engine_init(engine *e, model *m, const engine_opts *o);
/* Fills b with 0xff bytes, NaN as fp16 and fp32: a kernel that reads memory nothing wrote then
 * fails its test. Fresh device memory is zeros on most GPUs and the heap's leftovers on lavapipe
 * (0x7f7f..., an fp16 NaN, after glibc's MALLOC_PERTURB_, or whatever a freed buffer held), so
 * without this such a read passes or fails by the allocator's history (CI, 2026-12-03). */
int vk_poison(cvk_ctx *x, const cvk_buffer *b);
