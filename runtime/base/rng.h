/* Seeded pseudo-random numbers: splitmix64 to seed, xoshiro256** to draw. Deterministic
 * across platforms so a seed names the same synthetic model and the same test inputs. */
#pragma once
#include <math.h>
#include <stdint.h>

typedef struct rng {
    uint64_t s[4];
} rng;

static inline uint64_t rng_splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void rng_seed(rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = rng_splitmix(&seed);
}

static inline uint64_t rng_u64(rng *r) {
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5, result = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* uniform in [0, 1) with 24 bits */
static inline float rng_f32(rng *r) { return (float)(rng_u64(r) >> 40) * (1.0f / 16777216.0f); }
/* uniform in [0, n) */
static inline uint32_t rng_below(rng *r, uint32_t n) { return (uint32_t)(((rng_u64(r) >> 32) * n) >> 32); }
/* standard normal (Box-Muller) */
static inline float rng_normal(rng *r) {
    float u1 = rng_f32(r), u2 = rng_f32(r);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2);
}
