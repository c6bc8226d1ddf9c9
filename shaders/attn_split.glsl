// The split length of a token at pos, shared by attn_prefill.comp and attn_prefill_lanes.glsl
// (and mirrored by cvk_attn_prefill's check of the longest one): split_len, or with
// split_max > 0 split_len doubled until ceil((pos + 1) / len) <= split_max. It depends on the
// token's own position only, so its splits, and its result, do not depend on the batch.
uint attn_split_len(uint pos, uint split_len, uint split_max) {
    if (split_max == 0u) return split_len;
    uint need = pos / split_max + 1u; // ceil((pos + 1) / split_max)
    return need <= split_len ? split_len : split_len << uint(findMSB((need - 1u) / split_len) + 1);
}
