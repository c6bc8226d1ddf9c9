#include "tools/info_file.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/gguf/file_type.h"
#include "runtime/model/rope.h"
#include "runtime/text/chat_template.h"

#define LABEL "%-18s"

/* A metadata string as one printable line: at most 120 bytes, control bytes as '?'. */
static void put_text(FILE *out, gguf_str s) {
    uint64_t n = s.len < 120 ? s.len : 120;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        fputc(c < 0x20 || c == 0x7f ? '?' : c, out);
    }
    if (s.len > n) fputs("...", out);
}

/* A string key when the file has one (general.name ...). */
static void print_str_key(FILE *out, const gguf_file *f, const char *label, const char *key) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->val.type != GGUF_VT_STRING) return;
    fprintf(out, LABEL, label);
    put_text(out, kv->val.str);
    fputc('\n', out);
}

static void print_split(FILE *out, const gguf_file *f, const char *path) {
    if (f->n_shards < 2) return;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    /* gguf_open found the shards by this name, so it ends in -00001-of-%05u.gguf */
    size_t stem = strlen(base) - strlen("-00001-of-00000.gguf");
    fprintf(out, LABEL "%" PRIu32 " shards, %s ... %.*s-%05" PRIu32 "-of-%05" PRIu32 ".gguf (all present)\n", "split",
            f->n_shards, base, (int)stem, base, f->n_shards, f->n_shards);
}

/* general.file_type by llama.cpp's name for it. */
static void print_file_type(FILE *out, const gguf_file *f) {
    uint32_t id;
    fprintf(out, LABEL, "file type");
    if (!gguf_find_kv(f, "general.file_type")) {
        fprintf(out, "not recorded (no general.file_type; the tensor types are below)\n");
    } else if (gguf_get_u32(f, "general.file_type", &id)) {
        fprintf(out, "unreadable general.file_type\n");
    } else if (!gguf_file_type_name(id)) {
        fprintf(out, "unknown (general.file_type %" PRIu32 " is not in llama.cpp's llama_ftype)\n", id);
    } else {
        fprintf(out, "%s (%s, general.file_type %" PRIu32 ")\n", gguf_file_type_name(id), gguf_file_type_enum(id), id);
    }
}

static void print_bytes(FILE *out, const gguf_file *f) {
    fprintf(out, LABEL "%" PRIu64 " (%.1f MiB", "bytes on disk", f->disk_bytes, f->disk_bytes / 1048576.0);
    if (f->n_shards > 1) fprintf(out, " in %" PRIu32 " files", f->n_shards);
    fprintf(out, ")\n");
}

/* ARCH.suffix, where ARCH is general.architecture ("" when the file has none). */
static const gguf_kv *arch_kv(const gguf_file *f, const char *suffix) {
    gguf_str a = {"", 0};
    const gguf_kv *arch = gguf_find_kv(f, "general.architecture");
    if (arch && arch->val.type == GGUF_VT_STRING && arch->val.str.len < 64) a = arch->val.str;
    char key[160];
    snprintf(key, sizeof key, "%.*s.%s", (int)a.len, a.ptr, suffix);
    return gguf_find_kv(f, key);
}

static bool kv_number(const gguf_kv *kv, double *out) {
    if (!kv) return false;
    switch (kv->val.type) {
    case GGUF_VT_F32:
    case GGUF_VT_F64: *out = kv->val.f64; return true;
    case GGUF_VT_I8:
    case GGUF_VT_I16:
    case GGUF_VT_I32:
    case GGUF_VT_I64: *out = (double)kv->val.i64; return true;
    case GGUF_VT_U8:
    case GGUF_VT_U16:
    case GGUF_VT_U32:
    case GGUF_VT_U64: *out = (double)kv->val.u64; return true;
    default: return false;
    }
}

/* A RoPE cinder does not run (longrope, a bad factor), said after the keys: read as
 * model_load reads it (rope.h). */
static void put_rope_verdict(FILE *out, const gguf_file *f) {
    const gguf_kv *arch = gguf_find_kv(f, "general.architecture");
    if (!arch || arch->val.type != GGUF_VT_STRING || arch->val.str.len >= 64) return;
    char a[64];
    snprintf(a, sizeof a, "%.*s", (int)arch->val.str.len, arch->val.str.ptr);
    double ctx = 0;
    kv_number(arch_kv(f, "context_length"), &ctx);
    rope_config r;
    if (rope_config_read(f, a, ctx > 0 && ctx < UINT32_MAX ? (uint32_t)ctx : 0, &r))
        fprintf(out, " (cinder refuses it: %s)", cd_errmsg());
}

/* Context length and RoPE as the file states them (model.c's defaults where it states none). */
static void print_rope(FILE *out, const gguf_file *f) {
    double ctx, base = 10000, dims, factor, orig;
    fprintf(out, LABEL, "context (train)");
    if (kv_number(arch_kv(f, "context_length"), &ctx)) fprintf(out, "%.0f\n", ctx);
    else fprintf(out, "not recorded\n");
    bool has_base = kv_number(arch_kv(f, "rope.freq_base"), &base);
    fprintf(out, LABEL "neox, theta %g%s", "rope", base, has_base ? "" : " (not recorded: llama.cpp's default)");
    if (kv_number(arch_kv(f, "rope.dimension_count"), &dims)) fprintf(out, ", %.0f dims", dims);
    fputc('\n', out);

    const gguf_kv *type = arch_kv(f, "rope.scaling.type");
    bool has_factor = kv_number(arch_kv(f, "rope.scaling.factor"), &factor);
    bool has_orig = kv_number(arch_kv(f, "rope.scaling.original_context_length"), &orig);
    fprintf(out, LABEL, "rope scaling");
    if (type && type->val.type == GGUF_VT_STRING) put_text(out, type->val.str);
    else fputs("none", out);
    if (has_factor) fprintf(out, ", factor %g", factor);
    if (has_orig) fprintf(out, ", original context %.0f", orig);
    put_rope_verdict(out, f);
    fputc('\n', out);
}

/* The template cinder renders this file with (runtime/text/chat_template.h), or why none. */
static void print_chat_template(FILE *out, const gguf_file *f) {
    const gguf_kv *kv = gguf_find_kv(f, "tokenizer.chat_template");
    gguf_str t = kv && kv->val.type == GGUF_VT_STRING ? kv->val.str : (gguf_str){"", 0};
    const char *text = t.ptr;
    size_t len = (size_t)t.len;
    chat_template_id id;
    chat_template_match how;
    unsigned long long hash = chat_template_hash(text, len);
    if (chat_template_identify(text, len, &id, &how) == 0) {
        fprintf(out, "chat template     %s (%s)\n", chat_template_name(id),
                how == CHAT_MATCH_EXACT ? "the exact text cinder renders" : "the file has none: the default");
    } else if (how == CHAT_MATCH_MARKERS) {
        fprintf(out,
                "chat template     unknown, a variant of %s by its markers (%zu bytes, hash %016llx): serve and "
                "chat need --chat-template NAME\n",
                chat_template_name(id), len, hash);
    } else {
        fprintf(out, "chat template     unknown (%zu bytes, hash %016llx): serve and chat need --chat-template NAME\n",
                len, hash);
    }
}

typedef struct type_count {
    enum qtype type;
    uint64_t tensors, bytes;
} type_count;

static int by_bytes(const void *a, const void *b) {
    const type_count *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return (int)x->type - (int)y->type;
}

/* How many tensors and bytes of each type, the most bytes first. */
static void print_histogram(FILE *out, const gguf_file *f) {
    type_count counts[QTYPE_COUNT];
    size_t n = 0;
    uint64_t total = 0;
    for (int t = 0; t < QTYPE_COUNT; t++) counts[t] = (type_count){(enum qtype)t, 0, 0};
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if ((unsigned)t->type >= QTYPE_COUNT) continue; /* the reader knows every type it passes */
        counts[t->type].tensors++;
        counts[t->type].bytes += t->nbytes;
        total += t->nbytes;
    }
    qsort(counts, QTYPE_COUNT, sizeof *counts, by_bytes);
    while (n < QTYPE_COUNT && counts[n].tensors) n++;
    fprintf(out, LABEL "%zu type%s, %" PRIu64 " tensors, %" PRIu64 " bytes\n", "tensor types", n, n == 1 ? "" : "s",
            f->n_tensors, total);
    fprintf(out, "  %-8s %8s %16s %6s\n", "type", "tensors", "bytes", "share");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "  %-8s %8" PRIu64 " %16" PRIu64 " %5.1f%%%s\n", qtype_name(counts[i].type), counts[i].tensors,
                counts[i].bytes, total ? 100.0 * counts[i].bytes / total : 0.0,
                qtype_supported(counts[i].type) ? "" : "  (cinder does not compute this type)");
}

void info_print_file(FILE *out, const gguf_file *f, const char *path) {
    fprintf(out, LABEL "%s\n", "file", path);
    print_split(out, f, path);
    print_str_key(out, f, "name", "general.name");
    print_str_key(out, f, "finetune", "general.finetune");
    print_str_key(out, f, "size label", "general.size_label");
    print_file_type(out, f);
    fprintf(out, LABEL "%u, %" PRIu64 " tensors, %" PRIu64 " metadata keys\n", "GGUF version", f->version, f->n_tensors,
            f->n_kv);
    print_bytes(out, f);
    print_rope(out, f);
    print_chat_template(out, f);
    print_histogram(out, f);
}
