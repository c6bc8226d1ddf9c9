#version 450
// weight types: all
// Embedding gather: dst[r][e] = dequant(table[ids[r]])[e] for r < n_ids, e < n.
// One invocation per output element; workgroup (x, y) covers elements x*WG.. of output row y
// (+ z * 65535 when there are more rows). The table may be split over several parts (see
// runtime/vk/vk_memory.h): the host dispatches once per part, binding that part and passing
// row0/rows; each dispatch writes only the rows its part holds. An id outside the table
// gives a row of zeros, written by the dispatch of part 0.
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require

layout(local_size_x_id = 0) in;
const uint QTYPE = QTYPE_FIXED; // one module per weight type (cmake/shaders.cmake)

#define QB_BINDING 0
#include "quant_blocks.glsl"

layout(binding = 1) readonly buffer Ids { int ids[]; };
layout(binding = 2) writeonly buffer Dst { float dst[]; };

// mirrors cvk_get_rows_push in runtime/vk/op_get_rows.h
layout(push_constant) uniform Push {
    uint n;          // elements per row
    uint row_bytes;  // bytes per table row
    uint row0;       // first table row in the bound part
    uint rows;       // table rows in the bound part
    uint n_rows;     // table rows in all parts
    uint n_ids;      // output rows
    uint dst_stride; // floats between output rows
} pc;

void main() {
    uint e = gl_GlobalInvocationID.x;
    uint r = gl_WorkGroupID.y + gl_WorkGroupID.z * 65535u;
    if (e >= pc.n || r >= pc.n_ids) return;
    int id = ids[r];
    uint o = r * pc.dst_stride + e;
    if (id < 0 || uint(id) >= pc.n_rows) {
        if (pc.row0 == 0) dst[o] = 0.0;
        return;
    }
    uint t = uint(id);
    if (t < pc.row0 || t - pc.row0 >= pc.rows) return;
    dst[o] = qb_dequant(QTYPE, (t - pc.row0) * pc.row_bytes, e);
}
