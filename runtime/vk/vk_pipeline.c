#include "runtime/vk/vk_pipeline.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_check.h"
#include "runtime/vk/vk_shader_stats.h"
#include "runtime/vk/vk_spirv.h"

static int check_interface(const cvk_pipeline_desc *desc) {
    cvk_spirv_info si;
    if (cvk_spirv_reflect(desc->spv, desc->spv_size, &si)) return -1;
    if (si.other_sets) return cd_fail("uses a descriptor set other than 0");
    if (si.n_bindings > desc->n_bindings)
        return cd_fail("shader uses binding %u, the host declares %u", si.n_bindings - 1, desc->n_bindings);
    for (uint32_t b = 0; b < si.n_bindings; b++)
        if (si.binding_count[b] > 1) return cd_fail("binding %u is a descriptor array", b);
    if (si.push_size > desc->push_size)
        return cd_fail("push constants are %u bytes in the shader, %u on the host", si.push_size, desc->push_size);
    return 0;
}

static int create_layouts(cvk_pipeline *p, cvk_device *d, const cvk_pipeline_desc *desc) {
    VkDescriptorSetLayoutBinding b[CVK_SPIRV_MAX];
    for (uint32_t i = 0; i < desc->n_bindings; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                              .descriptorType = desc->texel_bindings >> i & 1
                                                  ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
                                                  : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = desc->n_bindings, .pBindings = b};
    if (CVK_CHECK(vkCreateDescriptorSetLayout(d->dev, &dci, NULL, &p->dsl))) return -1;
    VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = (desc->push_size + 3) & ~3u};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1,
                                      .pSetLayouts = &p->dsl,
                                      .pushConstantRangeCount = desc->push_size ? 1 : 0,
                                      .pPushConstantRanges = &pr};
    return CVK_CHECK(vkCreatePipelineLayout(d->dev, &lci, NULL, &p->layout));
}

static bool subgroup_size_ok(const cvk_caps *c, uint32_t s) {
    return s && c->subgroup_size_control && (s & (s - 1)) == 0 && s >= c->min_subgroup_size &&
        s <= c->max_subgroup_size;
}

/* What a VkPipeline is compiled from: the description's code and constants, the layout and the
 * subgroup size in force (cvk_pipeline_create's choice). */
typedef struct recipe {
    const uint32_t *spv;
    size_t spv_size;
    const uint32_t *spec;
    uint32_t n_spec, subgroup_size;
    bool full_subgroups;
    VkPipelineLayout layout;
} recipe;

static int build(cvk_device *d, VkPipelineCache cache, const recipe *r, VkPipeline *out) {
    const cvk_caps *c = &d->info.caps;
    VkShaderModuleCreateInfo mci = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = r->spv_size, .pCode = r->spv};
    VkShaderModule mod;
    if (CVK_CHECK(vkCreateShaderModule(d->dev, &mci, NULL, &mod))) return -1;
    VkSpecializationMapEntry map[CVK_MAX_SPEC];
    for (uint32_t i = 0; i < r->n_spec; i++) map[i] = (VkSpecializationMapEntry){i, i * 4, 4};
    VkSpecializationInfo si = {
        .mapEntryCount = r->n_spec, .pMapEntries = map, .dataSize = r->n_spec * 4, .pData = r->spec};
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo rss = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
        .requiredSubgroupSize = r->subgroup_size};
    VkPipelineShaderStageCreateInfo stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                             .pNext = r->subgroup_size ? &rss : NULL,
                                             .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                                             .module = mod,
                                             .pName = "main",
                                             .pSpecializationInfo = r->n_spec ? &si : NULL};
    if (r->full_subgroups && c->full_subgroups)
        stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, .stage = stage, .layout = r->layout};
    if (d->pipeline_stats) { /* compiled afresh (no cache), what the compiler made kept for reading */
        ci.flags |=
            VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR | VK_PIPELINE_CREATE_CAPTURE_INTERNAL_REPRESENTATIONS_BIT_KHR;
        cache = VK_NULL_HANDLE;
    }
    int rc = CVK_CHECK(vkCreateComputePipelines(d->dev, cache, 1, &ci, NULL, out));
    vkDestroyShaderModule(d->dev, mod, NULL);
    return rc;
}

/* --- the device's compiled pipelines --- */

typedef struct memo_key { /* no padding: compared with memcmp */
    uint64_t spv_hash, spv_size;
    uint32_t n_bindings, texel_bindings, push_size, n_spec, subgroup_size, full_subgroups;
    uint32_t spec[CVK_MAX_SPEC];
} memo_key;

/* One distinct pipeline. Its VkPipeline is built on first use (cvk_pipeline_handle) or by
 * cvk_pipeline_build_all, and published with an atomic store: a reader sees either none or a
 * whole one. Entries are allocated one by one, so a cvk_pipeline may keep a pointer to its own. */
typedef struct cvk_pipeline_shared {
    memo_key key;
    VkPipeline pipe; /* VK_NULL_HANDLE until built (__atomic access) */
    VkPipelineLayout layout;
    VkDescriptorSetLayout dsl;
    uint32_t subgroup_size; /* the required size in force */
    const uint32_t *spv;    /* the description's (embedded: valid for the process) */
    char name[32];
} memo_entry;

typedef struct cvk_pipeline_memo {
    pthread_mutex_t lock;
    memo_entry **e;
    size_t n, cap;
} cvk_pipeline_memo;

static void key_of(memo_key *k, const cvk_pipeline_desc *desc) {
    memset(k, 0, sizeof *k);
    k->spv_hash = XXH64(desc->spv, desc->spv_size, 0);
    k->spv_size = desc->spv_size;
    k->n_bindings = desc->n_bindings, k->texel_bindings = desc->texel_bindings, k->push_size = desc->push_size;
    k->n_spec = desc->n_spec, k->subgroup_size = desc->subgroup_size, k->full_subgroups = desc->full_subgroups;
    if (desc->n_spec) memcpy(k->spec, desc->spec, desc->n_spec * sizeof *desc->spec);
}

int cvk_pipeline_memo_init(cvk_device *d) {
    d->pipelines = calloc(1, sizeof *d->pipelines);
    if (!d->pipelines) return cd_fail("out of memory");
    pthread_mutex_init(&d->pipelines->lock, NULL);
    return 0;
}

_Static_assert(sizeof(memo_key) == 16 + 24 + 4 * CVK_MAX_SPEC, "memo_key has padding");

/* The memo's entry with this key, shared into p; false when there is none. */
static bool memo_find(cvk_pipeline_memo *m, const memo_key *k, cvk_pipeline *p) {
    memo_entry *found = NULL;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n && !found; i++)
        if (!memcmp(&m->e[i]->key, k, sizeof *k)) found = m->e[i];
    pthread_mutex_unlock(&m->lock);
    if (!found) return false;
    p->shared = found;
    p->pipe = __atomic_load_n(&found->pipe, __ATOMIC_ACQUIRE);
    p->layout = found->layout, p->dsl = found->dsl, p->subgroup_size = found->subgroup_size;
    return true;
}

/* Keeps p's layouts (and its pipeline, if built) under k, p sharing them from then on; false
 * (p stays its owner's) when there is no memory for it. */
static bool memo_add(cvk_pipeline_memo *m, const memo_key *k, cvk_pipeline *p, const uint32_t *spv) {
    memo_entry *e = malloc(sizeof *e);
    if (!e) return false;
    *e = (memo_entry){
        .key = *k, .pipe = p->pipe, .layout = p->layout, .dsl = p->dsl, .subgroup_size = p->subgroup_size, .spv = spv};
    memcpy(e->name, p->name, sizeof e->name);
    pthread_mutex_lock(&m->lock);
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        memo_entry **es = realloc(m->e, cap * sizeof *es);
        if (es) m->e = es, m->cap = cap;
    }
    bool added = m->n < m->cap;
    if (added) m->e[m->n++] = e;
    pthread_mutex_unlock(&m->lock);
    if (!added) free(e);
    else p->shared = e;
    return added;
}

static void destroy_objects(cvk_device *d, VkPipeline pipe, VkPipelineLayout layout, VkDescriptorSetLayout dsl) {
    if (pipe) vkDestroyPipeline(d->dev, pipe, NULL);
    if (layout) vkDestroyPipelineLayout(d->dev, layout, NULL);
    if (dsl) vkDestroyDescriptorSetLayout(d->dev, dsl, NULL);
}

void cvk_pipeline_memo_free(cvk_device *d) {
    cvk_pipeline_memo *m = d->pipelines;
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) {
        destroy_objects(d, m->e[i]->pipe, m->e[i]->layout, m->e[i]->dsl);
        free(m->e[i]);
    }
    pthread_mutex_destroy(&m->lock);
    free(m->e);
    free(m);
    d->pipelines = NULL;
}

size_t cvk_pipeline_memo_count(const cvk_device *d) { return d->pipelines ? d->pipelines->n : 0; }

size_t cvk_pipeline_memo_built(const cvk_device *d) {
    cvk_pipeline_memo *m = d->pipelines;
    size_t n = 0;
    if (!m) return 0;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n; i++) n += __atomic_load_n(&m->e[i]->pipe, __ATOMIC_ACQUIRE) != VK_NULL_HANDLE;
    pthread_mutex_unlock(&m->lock);
    return n;
}

/* Builds e's pipeline unless it is built: two threads may both build it, the first to publish
 * keeps its own and the other destroys its copy. */
static int build_shared(cvk_device *d, memo_entry *e, VkPipeline *out) {
    VkPipeline pipe = __atomic_load_n(&e->pipe, __ATOMIC_ACQUIRE);
    if (!pipe) {
        const memo_key *k = &e->key;
        recipe r = {.spv = e->spv,
                    .spv_size = k->spv_size,
                    .spec = k->spec,
                    .n_spec = k->n_spec,
                    .subgroup_size = e->subgroup_size,
                    .full_subgroups = k->full_subgroups,
                    .layout = e->layout};
        if (build(d, d->pcache, &r, &pipe)) return cd_fail_ctx("pipeline %s: ", e->name);
        VkPipeline none = VK_NULL_HANDLE;
        if (!__atomic_compare_exchange_n(&e->pipe, &none, pipe, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            vkDestroyPipeline(d->dev, pipe, NULL);
            pipe = none; /* the other thread's */
        }
    }
    *out = pipe;
    return 0;
}

int cvk_pipeline_handle(cvk_device *d, const cvk_pipeline *p, VkPipeline *out) {
    if (p->pipe || !p->shared) {
        *out = p->pipe;
        return p->pipe ? 0 : cd_fail("pipeline %s: recorded but never built (a described pipeline?)", p->name);
    }
    return build_shared(d, p->shared, out);
}

int cvk_pipeline_build_all(cvk_device *d) {
    cvk_pipeline_memo *m = d->pipelines;
    for (size_t i = 0; m; i++) {
        pthread_mutex_lock(&m->lock);
        memo_entry *e = i < m->n ? m->e[i] : NULL;
        pthread_mutex_unlock(&m->lock);
        if (!e) break;
        VkPipeline pipe;
        if (build_shared(d, e, &pipe)) return -1;
    }
    return 0;
}

/* Built at creation rather than on first use: with no memo (a device capturing statistics, whose
 * log needs every pipeline now) and on a compile-only device (nothing runs there to use one). */
static bool build_now(const cvk_device *d) { return !d->pipelines || d->compile_only; }

int cvk_pipeline_create(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, const cvk_pipeline_desc *desc) {
    memset(p, 0, sizeof *p);
    const char *name = desc->name ? desc->name : "?";
    snprintf(p->name, sizeof p->name, "%s", name);
    if (desc->n_bindings > CVK_SPIRV_MAX || desc->n_spec > CVK_MAX_SPEC)
        return cd_fail("pipeline %s: too many bindings or specialization constants", name);
    if (desc->push_size > d->info.caps.max_push)
        return cd_fail("pipeline %s: %u bytes of push constants exceed the device's %u", name, desc->push_size,
                       d->info.caps.max_push);
    p->n_bindings = desc->n_bindings;
    p->texel_bindings = desc->texel_bindings;
    p->push_size = desc->push_size;
    p->n_spec = desc->n_spec;
    if (desc->n_spec) memcpy(p->spec, desc->spec, desc->n_spec * sizeof *desc->spec);
    cvk_pipeline_memo *m = d->pipelines; /* none with statistics: each compiled afresh */
    memo_key key;
    if (m) {
        key_of(&key, desc);
        if (memo_find(m, &key, p)) return 0; /* (built, where build_now: every entry there is) */
    }
    p->subgroup_size = subgroup_size_ok(&d->info.caps, desc->subgroup_size) ? desc->subgroup_size : 0;
    recipe r = {.spv = desc->spv,
                .spv_size = desc->spv_size,
                .spec = desc->spec,
                .n_spec = desc->n_spec,
                .subgroup_size = p->subgroup_size,
                .full_subgroups = desc->full_subgroups};
    bool described = d->describe_pipelines; /* the layouts alone, nothing memoized (a plan's) */
    if (check_interface(desc) || create_layouts(p, d, desc) ||
        (!described && build_now(d) &&
         ((r.layout = p->layout, build(d, cache, &r, &p->pipe)) ||
          (d->shader_log && d->pipeline_stats && cvk_shader_log_add(d->shader_log, d, p))))) {
        cd_fail_ctx("pipeline %s: ", name);
        cvk_pipeline_destroy(d, p);
        return -1;
    }
    if (described || !m) return 0;
    if (memo_add(m, &key, p, desc->spv)) return 0;
    /* no memory to keep it: p stays its own, destroyed by its owner, and is built now */
    r.layout = p->layout;
    if (!p->pipe && build(d, cache, &r, &p->pipe)) {
        cd_fail_ctx("pipeline %s: ", name);
        cvk_pipeline_destroy(d, p);
        return -1;
    }
    return 0;
}

void cvk_pipeline_destroy(cvk_device *d, cvk_pipeline *p) {
    if (!p->shared) destroy_objects(d, p->pipe, p->layout, p->dsl);
    memset(p, 0, sizeof *p);
}
