// The RMS-norm scale of a row reduced by one workgroup, shared by rmsnorm.comp and
// moe_combine.comp so that both give the same bits (and by head_norm_rope.comp's per-head
// norm, for its fixed order): each invocation passes its own sum of
// squares over its strided share of the row (i = lid, lid + WG, ...), accumulated by fma; the
// WG partials are then added in one fixed pairwise tree in shared memory (partial i takes
// i + s for s = 1, 2, 4, ...), the same order whatever the subgroup size the driver compiled
// for (a subgroupAdd's order is the implementation's: two pipelines compiled at different sizes
// would disagree). Needs WG; log2(WG) barriers, the workgroup's invocations all reaching them.
shared float row_rms_partial[WG];

float row_rms_scale(float sumsq, uint n, float eps) {
    uint lid = gl_LocalInvocationID.x;
    row_rms_partial[lid] = sumsq;
    barrier();
    for (uint s = 1u; s < WG; s <<= 1u) {
        if ((lid & (2u * s - 1u)) == 0u && lid + s < WG)
            row_rms_partial[lid] = row_rms_partial[lid] + row_rms_partial[lid + s];
        barrier();
    }
    return inversesqrt(row_rms_partial[0] / float(n) + eps);
}
