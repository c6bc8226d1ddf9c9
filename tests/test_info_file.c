/* tools/info_file.c, the first part of `cinder info`, on files the writer makes with every
 * key it reads: names, llama.cpp's file type (known, unknown, absent), a split model's shards
 * and bytes, RoPE scaling that cinder runs (YaRN) and refuses (longrope), a template it does not know, and the tensor-type
 * histogram with a type cinder does not compute. tests/cli_contract.sh checks the same lines
 * on mkmodel files through the CLI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/error.h"
#include "runtime/gguf/file_type.h"
#include "runtime/gguf/gguf.h"
#include "tests/test_util.h"
#include "tools/info_file.h"

static uint8_t zeros[4096];

/* info_print_file's whole output for the file at path. */
static char *info_of(const char *path) {
    gguf_file *f;
    if (gguf_open(&f, path)) fail_msg("%s", cd_errmsg());
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    info_print_file(out, f, path);
    fclose(out);
    gguf_close(f);
    return text;
}

static void has_line(const char *text, const char *line) {
    const char *p = text;
    size_t n = strlen(line);
    while ((p = strstr(p, line)))
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == 0)) return;
        else p++;
    fail_msg("no line\n  %s\nin\n%s", line, text);
}

static void test_file_type_names(void **state) {
    (void)state;
    assert_string_equal(gguf_file_type_name(0), "F32");
    assert_string_equal(gguf_file_type_enum(0), "LLAMA_FTYPE_ALL_F32");
    assert_string_equal(gguf_file_type_name(1), "F16");
    assert_string_equal(gguf_file_type_enum(1), "LLAMA_FTYPE_MOSTLY_F16");
    assert_string_equal(gguf_file_type_name(11), "Q3_K_S");
    assert_string_equal(gguf_file_type_name(15), "Q4_K_M");
    assert_string_equal(gguf_file_type_name(30), "IQ4_XS");
    assert_string_equal(gguf_file_type_name(32), "BF16");
    assert_string_equal(gguf_file_type_name(38), "MXFP4_MOE");
    assert_string_equal(gguf_file_type_name(41), "Q2_0");
    assert_null(gguf_file_type_name(4)); /* removed from llama.cpp */
    assert_null(gguf_file_type_name(34));
    assert_null(gguf_file_type_name(42));
    assert_null(gguf_file_type_name(1024)); /* LLAMA_FTYPE_GUESSED is never stored */
}

static gguf_writer *described_writer(int64_t file_type) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "qwen3moe");
    gguf_writer_set_str(w, "general.name", "Qwen3 30B A3B Instruct 2507");
    gguf_writer_set_str(w, "general.finetune", "Instruct-2507");
    gguf_writer_set_str(w, "general.size_label", "30B-A3B\nx"); /* a control byte is shown as '?' */
    if (file_type >= 0) gguf_writer_set_u32(w, "general.file_type", (uint32_t)file_type);
    gguf_writer_set_u32(w, "qwen3moe.context_length", 262144);
    gguf_writer_set_f32(w, "qwen3moe.rope.freq_base", 5e6f);
    gguf_writer_set_str(w, "qwen3moe.rope.scaling.type", "yarn");
    gguf_writer_set_f32(w, "qwen3moe.rope.scaling.factor", 4.0f);
    gguf_writer_set_u32(w, "qwen3moe.rope.scaling.original_context_length", 32768);
    gguf_writer_set_str(w, "tokenizer.chat_template", "{{ messages }}");
    assert_int_equal(gguf_writer_add_tensor(w, "a", QTYPE_F32, 1, (int64_t[]){256}, zeros, NULL, NULL), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "b", QTYPE_Q8_0, 2, (int64_t[]){256, 4}, zeros, NULL, NULL), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "c", QTYPE_Q3_K, 2, (int64_t[]){256, 3}, zeros, NULL, NULL), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "d", QTYPE_F32, 1, (int64_t[]){32}, zeros, NULL, NULL), 0);
    return w;
}

static void test_described_file(void **state) {
    (void)state;
    const char *path = tu_tmp_path("info_described.gguf");
    gguf_writer *w = described_writer(30);
    assert_int_equal(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
    char *text = info_of(path);
    has_line(text, "name              Qwen3 30B A3B Instruct 2507");
    has_line(text, "finetune          Instruct-2507");
    has_line(text, "size label        30B-A3B?x");
    has_line(text, "file type         IQ4_XS (LLAMA_FTYPE_MOSTLY_IQ4_XS, general.file_type 30)");
    has_line(text, "context (train)   262144");
    has_line(text, "rope              neox, theta 5e+06");
    has_line(text, "rope scaling      yarn, factor 4, original context 32768");
    assert_non_null(strstr(text, "\nchat template     unknown (14 bytes, hash "));
    /* 1024 + 128 bytes of F32, 4 x 272 of Q8_0, 3 x 110 of Q3_K */
    has_line(text, "tensor types      3 types, 4 tensors, 2570 bytes");
    has_line(text, "  F32             2             1152  44.8%");
    has_line(text, "  Q8_0            1             1088  42.3%");
    /* Q3_K stops being refused when cinder computes it (issue 48) */
    char line[128];
    snprintf(line, sizeof line, "  Q3_K            1              330  12.8%%%s",
             qtype_supported(QTYPE_Q3_K) ? "" : "  (cinder does not compute this type)");
    has_line(text, line);
    assert_null(strstr(text, "\nsplit"));
    free(text);
}

/* A scaling cinder does not run is named with the reason model_load will give. */
static void test_refused_rope(void **state) {
    (void)state;
    const char *path = tu_tmp_path("info_longrope.gguf");
    gguf_writer *w = described_writer(30);
    gguf_writer_set_str(w, "qwen3moe.rope.scaling.type", "longrope");
    assert_int_equal(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
    char *text = info_of(path);
    has_line(text,
             "rope scaling      longrope, factor 4, original context 32768 (cinder refuses it: RoPE scaling "
             "'longrope' is not supported (cinder runs none, linear and yarn))");
    free(text);
}

static void test_file_type_absent_or_unknown(void **state) {
    (void)state;
    static const struct {
        int64_t id;
        const char *line;
    } cases[] = {
        {-1, "file type         not recorded (no general.file_type; the tensor types are below)"},
        {99, "file type         unknown (general.file_type 99 is not in llama.cpp's llama_ftype)"},
        {0, "file type         F32 (LLAMA_FTYPE_ALL_F32, general.file_type 0)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = tu_tmp_path("info_ftype.gguf");
        gguf_writer *w = described_writer(cases[i].id);
        assert_int_equal(gguf_writer_write(w, path), 0);
        gguf_writer_free(w);
        char *text = info_of(path);
        has_line(text, cases[i].line);
        free(text);
    }
}

/* A split model: the shards, and the bytes of all of them. */
static void test_split_file(void **state) {
    (void)state;
    char prefix[512], first[600], path[600];
    snprintf(prefix, sizeof prefix, "%s/info_split", tu_tmp_dir());
    gguf_writer *w = described_writer(15);
    uint32_t n;
    assert_int_equal(gguf_writer_write_split(w, prefix, 1, &n), 0);
    gguf_writer_free(w);
    assert_int_equal(n, 4);
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        gguf_split_path(path, sizeof path, prefix, i, n);
        size_t len;
        free(tu_read_file(path, &len));
        total += len;
    }
    gguf_split_path(first, sizeof first, prefix, 0, n);
    char *text = info_of(first);
    has_line(text,
             "split             4 shards, info_split-00001-of-00004.gguf ... info_split-00004-of-00004.gguf "
             "(all present)");
    char want[128];
    snprintf(want, sizeof want, "bytes on disk     %zu (%.1f MiB in 4 files)", total, total / 1048576.0);
    has_line(text, want);
    has_line(text, "file type         Q4_K_M (LLAMA_FTYPE_MOSTLY_Q4_K_M, general.file_type 15)");
    has_line(text, "tensor types      3 types, 4 tensors, 2570 bytes");
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_type_names), cmocka_unit_test(test_described_file),
        cmocka_unit_test(test_refused_rope),    cmocka_unit_test(test_file_type_absent_or_unknown),
        cmocka_unit_test(test_split_file),
    };
    return tu_status(cmocka_run_group_tests(tests, NULL, NULL));
}
