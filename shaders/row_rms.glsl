// The RMS-norm scale of a row reduced by one workgroup, shared by rmsnorm.comp and
// moe_combine.comp so that both give the same bits: each invocation passes its own sum of
// squares over its strided share of the row (i = lid, lid + WG, ...); subgroups reduce with
// subgroupAdd and every invocation sums the per-subgroup partials from shared memory in a fixed
// order (deterministic). Needs WG, GL_KHR_shader_subgroup_basic and _arithmetic; one barrier.
shared float row_rms_partial[WG]; // one per subgroup; WG bounds the subgroup count

float row_rms_scale(float sumsq, uint n, float eps) {
    sumsq = subgroupAdd(sumsq);
    if (subgroupElect()) row_rms_partial[gl_SubgroupID] = sumsq;
    barrier();
    float sum = 0.0;
    for (uint s = 0; s < gl_NumSubgroups; s++) sum += row_rms_partial[s];
    return inversesqrt(sum / float(n) + eps);
}
