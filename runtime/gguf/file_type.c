/* The table of llama.h's enum llama_ftype, written out here (ids are append-only there). */
#include "runtime/gguf/file_type.h"

#include <stddef.h>

static const char *const enums[] = {
    [0] = "LLAMA_FTYPE_ALL_F32",        [1] = "LLAMA_FTYPE_MOSTLY_F16",      [2] = "LLAMA_FTYPE_MOSTLY_Q4_0",
    [3] = "LLAMA_FTYPE_MOSTLY_Q4_1",    [7] = "LLAMA_FTYPE_MOSTLY_Q8_0",     [8] = "LLAMA_FTYPE_MOSTLY_Q5_0",
    [9] = "LLAMA_FTYPE_MOSTLY_Q5_1",    [10] = "LLAMA_FTYPE_MOSTLY_Q2_K",    [11] = "LLAMA_FTYPE_MOSTLY_Q3_K_S",
    [12] = "LLAMA_FTYPE_MOSTLY_Q3_K_M", [13] = "LLAMA_FTYPE_MOSTLY_Q3_K_L",  [14] = "LLAMA_FTYPE_MOSTLY_Q4_K_S",
    [15] = "LLAMA_FTYPE_MOSTLY_Q4_K_M", [16] = "LLAMA_FTYPE_MOSTLY_Q5_K_S",  [17] = "LLAMA_FTYPE_MOSTLY_Q5_K_M",
    [18] = "LLAMA_FTYPE_MOSTLY_Q6_K",   [19] = "LLAMA_FTYPE_MOSTLY_IQ2_XXS", [20] = "LLAMA_FTYPE_MOSTLY_IQ2_XS",
    [21] = "LLAMA_FTYPE_MOSTLY_Q2_K_S", [22] = "LLAMA_FTYPE_MOSTLY_IQ3_XS",  [23] = "LLAMA_FTYPE_MOSTLY_IQ3_XXS",
    [24] = "LLAMA_FTYPE_MOSTLY_IQ1_S",  [25] = "LLAMA_FTYPE_MOSTLY_IQ4_NL",  [26] = "LLAMA_FTYPE_MOSTLY_IQ3_S",
    [27] = "LLAMA_FTYPE_MOSTLY_IQ3_M",  [28] = "LLAMA_FTYPE_MOSTLY_IQ2_S",   [29] = "LLAMA_FTYPE_MOSTLY_IQ2_M",
    [30] = "LLAMA_FTYPE_MOSTLY_IQ4_XS", [31] = "LLAMA_FTYPE_MOSTLY_IQ1_M",   [32] = "LLAMA_FTYPE_MOSTLY_BF16",
    [36] = "LLAMA_FTYPE_MOSTLY_TQ1_0",  [37] = "LLAMA_FTYPE_MOSTLY_TQ2_0",   [38] = "LLAMA_FTYPE_MOSTLY_MXFP4_MOE",
    [39] = "LLAMA_FTYPE_MOSTLY_NVFP4",  [40] = "LLAMA_FTYPE_MOSTLY_Q1_0",    [41] = "LLAMA_FTYPE_MOSTLY_Q2_0",
};

const char *gguf_file_type_enum(uint32_t id) { return id < sizeof enums / sizeof enums[0] ? enums[id] : NULL; }

/* The preset name is the enum's name less "LLAMA_FTYPE_MOSTLY_" (or "LLAMA_FTYPE_ALL_"). */
const char *gguf_file_type_name(uint32_t id) {
    const char *e = gguf_file_type_enum(id);
    if (!e) return NULL;
    return e + (id == 0 ? sizeof "LLAMA_FTYPE_ALL_" - 1 : sizeof "LLAMA_FTYPE_MOSTLY_" - 1);
}
