/* cinder profile (the model part): one prefill and D batched decode steps of the engine's own
 * forward pass (gpu_forward_batch, what the scheduler runs), with a GPU timestamp around every
 * op, dispatch and copy, and each op's bytes and FLOPs from its shapes (step_cost.h). Prints
 * per-kernel and per-phase tables, the decode roofline against the device's peak bandwidth,
 * the host side of each step and the timestamps' own overhead; --trace writes the spans as a
 * Chrome/Perfetto trace. With a scenario or trace file it replays those requests through the
 * engine instead (batch = requests in flight), timing every pass, and adds each request's
 * cache work (match, host restore, disk reads) and latencies. docs/PROFILE.md explains every
 * column. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/model/gpu_model.h"
#include "runtime/model/model.h"

typedef struct profile_opts {
    const char *model;
    rope_override rope; /* --rope-scaling ... over the file's (model_load_opts.rope) */
    uint32_t prompt;    /* P: prompt tokens prefilled (timed) */
    uint32_t gen;       /* D: decode steps (timed) */
    uint32_t context;   /* C: tokens already in the sequence before the prompt (untimed) */
    uint32_t batch;     /* B: sequences per decode step */
    uint32_t seed;
    const char *trace;      /* Chrome trace JSON path, or NULL */
    const char *plot;       /* SVG bar chart of each op's share, or NULL */
    const char *scenario;   /* replay scripts/scenarios/NAME.jsonl through the engine instead */
    const char *trace_file; /* or this trace file (scripts/scenarios/README.md's format) */
    bool json;
    int device;                          /* -1: the default choice */
    double peak_gbps;                    /* the device's read bandwidth; 0: the device card's */
    double peak_tflops;                  /* fp32 FMA rate; 0: the device card's */
    const char *peak_source;             /* set by profile_model: where the bandwidth peak came from */
    int gate_up_pairs;                   /* gpu_model_opts.gate_up_pairs */
    int int_dot;                         /* gpu_model_opts.int_dot */
    gpu_rows_shape few_shape, one_shape; /* gpu_model_opts's: other kernel shapes to measure */
    gpu_tile_shape big_tile;             /* and the tiled kernel's */
    gpu_rows_shape head_shape;           /* and a GPU's few-token lm_head's */
} profile_opts;

/* Fills the peaks the user did not give from the device card (tools/device_card.h). */
int profile_model(profile_opts *o, const model *m);
