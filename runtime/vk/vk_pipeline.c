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

static int create_pipeline(cvk_pipeline *p, cvk_device *d, VkPipelineCache cache, const cvk_pipeline_desc *desc) {
    const cvk_caps *c = &d->info.caps;
    VkShaderModuleCreateInfo mci = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = desc->spv_size, .pCode = desc->spv};
    VkShaderModule mod;
    if (CVK_CHECK(vkCreateShaderModule(d->dev, &mci, NULL, &mod))) return -1;
    VkSpecializationMapEntry map[CVK_MAX_SPEC];
    for (uint32_t i = 0; i < desc->n_spec; i++) map[i] = (VkSpecializationMapEntry){i, i * 4, 4};
    VkSpecializationInfo si = {
        .mapEntryCount = desc->n_spec, .pMapEntries = map, .dataSize = desc->n_spec * 4, .pData = desc->spec};
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo rss = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
        .requiredSubgroupSize = desc->subgroup_size};
    bool want_size = p->subgroup_size != 0; /* cvk_pipeline_create's choice */
    VkPipelineShaderStageCreateInfo stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                             .pNext = want_size ? &rss : NULL,
                                             .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                                             .module = mod,
                                             .pName = "main",
                                             .pSpecializationInfo = desc->n_spec ? &si : NULL};
    if (desc->full_subgroups && c->full_subgroups)
        stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, .stage = stage, .layout = p->layout};
    if (d->pipeline_stats) { /* compiled afresh (no cache), what the compiler made kept for reading */
        ci.flags |=
            VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR | VK_PIPELINE_CREATE_CAPTURE_INTERNAL_REPRESENTATIONS_BIT_KHR;
        cache = VK_NULL_HANDLE;
    }
    int rc = CVK_CHECK(vkCreateComputePipelines(d->dev, cache, 1, &ci, NULL, &p->pipe));
    vkDestroyShaderModule(d->dev, mod, NULL);
    return rc;
}

/* --- the device's compiled pipelines --- */

typedef struct memo_key { /* no padding: compared with memcmp */
    uint64_t spv_hash, spv_size;
    uint32_t n_bindings, texel_bindings, push_size, n_spec, subgroup_size, full_subgroups;
    uint32_t spec[CVK_MAX_SPEC];
} memo_key;

typedef struct memo_entry {
    memo_key key;
    VkPipeline pipe;
    VkPipelineLayout layout;
    VkDescriptorSetLayout dsl;
    uint32_t subgroup_size; /* the required size in force */
} memo_entry;

typedef struct cvk_pipeline_memo {
    pthread_mutex_t lock;
    memo_entry *e;
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

/* The memo's copy of the pipeline with this key into p; false when there is none. */
static bool memo_find(cvk_pipeline_memo *m, const memo_key *k, cvk_pipeline *p) {
    bool found = false;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n && !found; i++)
        if (!memcmp(&m->e[i].key, k, sizeof *k)) {
            p->pipe = m->e[i].pipe, p->layout = m->e[i].layout, p->dsl = m->e[i].dsl;
            p->subgroup_size = m->e[i].subgroup_size;
            found = true;
        }
    pthread_mutex_unlock(&m->lock);
    return found;
}

/* Keeps p's objects under k; false (p stays its owner's) when there is no memory for it. */
static bool memo_add(cvk_pipeline_memo *m, const memo_key *k, const cvk_pipeline *p) {
    bool added = false;
    pthread_mutex_lock(&m->lock);
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        memo_entry *e = realloc(m->e, cap * sizeof *e);
        if (e) m->e = e, m->cap = cap;
    }
    if (m->n < m->cap) {
        m->e[m->n++] = (memo_entry){
            .key = *k, .pipe = p->pipe, .layout = p->layout, .dsl = p->dsl, .subgroup_size = p->subgroup_size};
        added = true;
    }
    pthread_mutex_unlock(&m->lock);
    return added;
}

static bool memo_holds(cvk_pipeline_memo *m, VkPipeline pipe) {
    bool held = false;
    if (!m || !pipe) return false;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n && !held; i++) held = m->e[i].pipe == pipe;
    pthread_mutex_unlock(&m->lock);
    return held;
}

static void destroy_objects(cvk_device *d, VkPipeline pipe, VkPipelineLayout layout, VkDescriptorSetLayout dsl) {
    if (pipe) vkDestroyPipeline(d->dev, pipe, NULL);
    if (layout) vkDestroyPipelineLayout(d->dev, layout, NULL);
    if (dsl) vkDestroyDescriptorSetLayout(d->dev, dsl, NULL);
}

void cvk_pipeline_memo_free(cvk_device *d) {
    cvk_pipeline_memo *m = d->pipelines;
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) destroy_objects(d, m->e[i].pipe, m->e[i].layout, m->e[i].dsl);
    pthread_mutex_destroy(&m->lock);
    free(m->e);
    free(m);
    d->pipelines = NULL;
}

size_t cvk_pipeline_memo_count(const cvk_device *d) { return d->pipelines ? d->pipelines->n : 0; }

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
        if (memo_find(m, &key, p)) return 0;
    }
    p->subgroup_size = subgroup_size_ok(&d->info.caps, desc->subgroup_size) ? desc->subgroup_size : 0;
    bool build = !d->describe_pipelines; /* described: the layouts alone, nothing memoized (a plan's) */
    if (check_interface(desc) || create_layouts(p, d, desc) ||
        (build &&
         (create_pipeline(p, d, cache, desc) ||
          (d->shader_log && d->pipeline_stats && cvk_shader_log_add(d->shader_log, d, p))))) {
        cd_fail_ctx("pipeline %s: ", name);
        cvk_pipeline_destroy(d, p);
        return -1;
    }
    if (build && m) memo_add(m, &key, p); /* no memory to keep it: p stays its own, destroyed by its owner */
    return 0;
}

void cvk_pipeline_destroy(cvk_device *d, cvk_pipeline *p) {
    if (!memo_holds(d->pipelines, p->pipe)) destroy_objects(d, p->pipe, p->layout, p->dsl);
    memset(p, 0, sizeof *p);
}
