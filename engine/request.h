/* A submitted request inside the engine (private to engine). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_pages.h"
#include "radix/radix.h"
#include "engine/engine.h"
#include "runtime/model/logit_adjust.h"
#include "runtime/model/sampler.h"
#include "runtime/text/json_mask.h"

typedef enum req_state { REQ_WAITING, REQ_RUNNING, REQ_DONE } req_state;

typedef struct engine_req {
    uint32_t handle;
    req_state state;
    engine_request rq;          /* the caller's request; ids and stop_ids point at our copies,
                             * cache_salt is NULL (its namespace is ns) */
    uint8_t ns[RADIX_NS_BYTES]; /* the cache namespace of its lookups, inserts and dedup */
    int32_t *all;               /* prompt + generated so far: [0, n_all) */
    int32_t *stop;              /* [rq.n_stop] */
    uint32_t n_prompt, n_all;
    bool sample;     /* sampled (temperature > 0), else greedy */
    bool sample_gpu; /* sampled on the device (smp holds only the parameters and rng) */
    sampler smp;
    logit_adjust adj; /* rq.adjust's copy (rq.adjust is NULL) */
    bool adjusted;    /* adj changes the logits: every token is chosen on the host */
    json_mask jm;     /* rq.json_object: the reply so far, as a JSON prefix (host choice too) */

    /* running: its block-table row, pages and pin */
    uint32_t row;
    kv_seq seq;            /* pages reserved for [0, n_target) at admission, grown by decode */
    radix_match m;         /* the acquired prefix, pinned */
    uint32_t n_kv;         /* tokens whose K/V is written */
    uint32_t n_kv_max;     /* the most it has had since its first admission (cached or written): a
                             * position below it fed after a preemption is recomputed work */
    uint32_t n_target;     /* prefill until n_kv reaches it (= n_all at admission) */
    bool prompt_committed; /* its prefill is in the cache (later requests can match it) */
    uint32_t lp_next;      /* rq.on_prompt_logprob: the first prompt position whose row is still to be
                             * read (its log-probability is token lp_next + 1's) */
    uint64_t admit_no;     /* larger = admitted later (preemption takes the youngest) */

    /* waiting */
    uint64_t submit_step;   /* the step count at submit (age, for admission) */
    bool deferred;          /* waited for another request's prefill of its prefix */
    uint32_t deferred_base; /* its cached tokens when it first waited */

    engine_reply reply;
    double t_submit, t_last; /* ms */
} engine_req;
