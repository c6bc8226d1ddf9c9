#include "runtime/vk/vk_spirv.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"

enum {
    OP_TYPE_INT = 21,
    OP_TYPE_FLOAT = 22,
    OP_TYPE_VECTOR = 23,
    OP_TYPE_ARRAY = 28,
    OP_TYPE_STRUCT = 30,
    OP_TYPE_POINTER = 32,
    OP_CONSTANT = 43,
    OP_VARIABLE = 59,
    OP_DECORATE = 71,
    OP_MEMBER_DECORATE = 72,
    DEC_BINDING = 33,
    DEC_SET = 34,
    DEC_OFFSET = 35,
    SC_PUSH = 9,
};

/* Per-id facts gathered in one pass. */
typedef struct ids {
    uint32_t *binding, *set, *op, *a, *b; /* a/b: first two operands after the result id */
    uint32_t bound;
} ids;

static int ids_alloc(ids *t, uint32_t bound) {
    t->bound = bound;
    uint32_t *mem = malloc(5 * (size_t)bound * sizeof *mem);
    if (!mem) return cd_fail("out of memory (SPIR-V reflection)");
    memset(mem, 0xff, 2 * (size_t)bound * sizeof *mem);
    memset(mem + 2 * (size_t)bound, 0, 3 * (size_t)bound * sizeof *mem);
    t->binding = mem, t->set = mem + bound, t->op = mem + 2 * (size_t)bound;
    t->a = mem + 3 * (size_t)bound, t->b = mem + 4 * (size_t)bound;
    return 0;
}

/* Bytes of a scalar or vector type; 0 when it is something else. */
static uint32_t type_size(const ids *t, uint32_t id) {
    if (id >= t->bound) return 0;
    if (t->op[id] == OP_TYPE_INT || t->op[id] == OP_TYPE_FLOAT) return t->a[id] / 8;
    if (t->op[id] == OP_TYPE_VECTOR) return type_size(t, t->a[id]) * t->b[id];
    return 0;
}

/* Descriptor count of a variable's pointee: the array length, or 1. */
static uint32_t descriptor_count(const ids *t, uint32_t ptr_type) {
    uint32_t pointee = ptr_type < t->bound ? t->b[ptr_type] : 0;
    if (pointee >= t->bound || t->op[pointee] != OP_TYPE_ARRAY) return 1;
    uint32_t len = t->b[pointee];
    return len < t->bound && t->op[len] == OP_CONSTANT ? t->a[len] : 0;
}

static void record(ids *t, const uint32_t *w, uint32_t op, uint32_t n) {
    switch (op) {
    case OP_TYPE_INT:
    case OP_TYPE_FLOAT:
    case OP_TYPE_VECTOR:
    case OP_TYPE_ARRAY:
    case OP_TYPE_POINTER:
        if (n >= 3 && w[1] < t->bound) {
            t->op[w[1]] = op;
            t->a[w[1]] = w[2];
            t->b[w[1]] = n >= 4 ? w[3] : 0;
        }
        break;
    case OP_CONSTANT:
    case OP_VARIABLE: /* result type, result id, value / storage class */
        if (n >= 4 && w[2] < t->bound) {
            t->op[w[2]] = op;
            t->a[w[2]] = w[3];
            t->b[w[2]] = w[1];
        }
        break;
    case OP_DECORATE:
        if (n >= 4 && w[1] < t->bound && w[2] == DEC_BINDING) t->binding[w[1]] = w[3];
        if (n >= 4 && w[1] < t->bound && w[2] == DEC_SET) t->set[w[1]] = w[3];
        break;
    default: break;
    }
}

/* Member offsets of the push-constant struct `block`, and the end of its last member.
 * Decorations precede types in a module, so the struct's member types are seen last. */
static void push_members(const ids *t, const uint32_t *words, size_t n_words, uint32_t block, cvk_spirv_info *o) {
    uint32_t last_member = 0, last_off = 0, last_type = 0;
    for (size_t i = 5; i < n_words;) {
        uint32_t n = words[i] >> 16, op = words[i] & 0xffff;
        if (n == 0 || i + n > n_words) break;
        const uint32_t *w = &words[i];
        if (op == OP_MEMBER_DECORATE && n >= 5 && w[1] == block && w[3] == DEC_OFFSET && w[2] < CVK_SPIRV_MAX) {
            o->push_offset[w[2]] = w[4];
            if (w[2] + 1 > o->n_push) o->n_push = w[2] + 1;
            if (w[4] >= last_off) {
                last_off = w[4];
                last_member = w[2];
            }
        }
        if (op == OP_TYPE_STRUCT && w[1] == block && last_member + 2 < n) last_type = w[2 + last_member];
        i += n;
    }
    uint32_t sz = type_size(t, last_type);
    o->push_size = sz ? last_off + sz : 0;
}

int cvk_spirv_reflect(const uint32_t *words, size_t bytes, cvk_spirv_info *o) {
    memset(o, 0, sizeof *o);
    size_t n_words = bytes / 4;
    if (n_words < 5 || words[0] != 0x07230203u) return cd_fail("not a SPIR-V module");
    ids t;
    if (ids_alloc(&t, words[3])) return -1;
    for (size_t i = 5; i < n_words;) {
        uint32_t n = words[i] >> 16, op = words[i] & 0xffff;
        if (n == 0 || i + n > n_words) {
            free(t.binding);
            return cd_fail("truncated SPIR-V module");
        }
        record(&t, &words[i], op, n);
        i += n;
    }
    for (uint32_t id = 0; id < t.bound; id++) {
        if (t.op[id] != OP_VARIABLE) continue;
        uint32_t ptr = t.b[id];
        if (t.a[id] == SC_PUSH && ptr < t.bound) {
            o->has_push = true;
            push_members(&t, words, n_words, t.b[ptr], o);
        }
        if (t.binding[id] == UINT32_MAX) continue;
        if (t.set[id] != 0 && t.set[id] != UINT32_MAX) {
            o->other_sets = true;
            continue;
        }
        uint32_t b = t.binding[id];
        if (b >= CVK_SPIRV_MAX) {
            free(t.binding);
            return cd_fail("binding %u out of range", b);
        }
        o->binding_count[b] = descriptor_count(&t, ptr);
        if (b + 1 > o->n_bindings) o->n_bindings = b + 1;
    }
    free(t.binding);
    return 0;
}

const cinder_spv_module *cvk_spirv_module(const char *shader, uint32_t qtype) {
    for (size_t i = 0; i < cinder_spv_all_count; i++)
        if (cinder_spv_all[i].qtype == qtype && !strcmp(cinder_spv_all[i].shader, shader)) return &cinder_spv_all[i];
    if (qtype == CINDER_SPV_UNTYPED) cd_fail("no shader module %s", shader);
    else cd_fail("no %s module for weight type %u (its \"// weight types:\" line)", shader, qtype);
    return NULL;
}
