/* general.file_type: llama.cpp's `enum llama_ftype` (include/llama.h), the "mostly" type a
 * converter or llama-quantize wrote a file as, by the name llama-quantize's presets use. */
#pragma once
#include <stdint.h>

/* "Q4_K_M" for 15, "F16" for 1, "F32" for 0 ...; NULL for an id llama.cpp does not define
 * (4 to 6 and 33 to 35 were removed). */
const char *gguf_file_type_name(uint32_t id);
/* The enum's own name: "LLAMA_FTYPE_MOSTLY_Q4_K_M", "LLAMA_FTYPE_ALL_F32"; NULL as above. */
const char *gguf_file_type_enum(uint32_t id);
