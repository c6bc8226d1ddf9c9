#!/usr/bin/env node
// llama.cpp's prompt-lookup decoding as cinder's peer for `cinder bench --spec-tokens N
// --prompt-text TEXT`: node-llama-cpp (third_party/npm) with its InputLookupTokenPredictor (the
// tokens after an occurrence in the prompt of the last few, checked in one llama_decode; cinder
// looks in the whole history, prompt and reply), greedy, on the same GGUF file, prompt and number
// of tokens.
//
//   node scripts/peer_lookup.mjs --model M.gguf --prompt-text TEXT [--gen N] [--repeat R]
//        [--spec-tokens K] [--gpu vulkan|cpu] [--threads N]
//
// --spec-tokens 0 (the default) decodes one token a step; K > 0 predicts up to K tokens from
// patterns of 2 to 4 tokens (cinder's lookup_draft.h). Prints one JSON line: decode_tok_s (the
// median over the repeats of generated tokens after the first / the time from the first to the
// last), the predictions validated and refuted, and the tokens (so the two sides can be checked
// to agree). Vulkan on lavapipe: GGML_VK_VISIBLE_DEVICES=0 (llama.cpp skips CPU-type devices
// otherwise), flash attention off (it crashes lavapipe: docs/PERF.md).
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(root, "third_party/npm/package.json"));
const argv = process.argv.slice(2);
const arg = (name, def) => { const i = argv.indexOf(name); return i >= 0 && i + 1 < argv.length ? argv[i + 1] : def; };
const opt = { model: arg("--model"), text: arg("--prompt-text"), gen: Number(arg("--gen", "48")), repeat: Number(arg("--repeat", "2")),
    spec: Number(arg("--spec-tokens", "0")), gpu: arg("--gpu", "vulkan"), threads: arg("--threads") && Number(arg("--threads")) };
if (!opt.model || opt.text === undefined || !(opt.gen >= 2) || !(opt.repeat >= 1) || !(opt.spec >= 0) || !["vulkan", "cpu"].includes(opt.gpu)) {
    console.error("usage: node scripts/peer_lookup.mjs --model M.gguf --prompt-text TEXT [--gen N] [--repeat R] [--spec-tokens K] [--gpu vulkan|cpu] [--threads N]");
    process.exit(2);
}
if (opt.gpu === "vulkan") process.env.GGML_VK_VISIBLE_DEVICES ??= "0";
const { getLlama, LlamaLogLevel, InputLookupTokenPredictor } = await import(pathToFileURL(require.resolve("node-llama-cpp")).href);

const llama = await getLlama({ gpu: opt.gpu === "vulkan" ? "vulkan" : false, logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: opt.model, gpuLayers: opt.gpu === "vulkan" ? "max" : 0 });
const prompt = model.tokenize(opt.text, true);
const context = await model.createContext({ contextSize: prompt.length + opt.gen + 64, sequences: 1, flashAttention: false,
    ...(opt.threads ? { threads: opt.threads } : {}) });
const tokenPredictor = opt.spec > 0
    ? new InputLookupTokenPredictor({ patternLength: { min: 2, max: 4 }, predictionLength: { min: 1, max: opt.spec } })
    : undefined;
const sequence = context.getSequence({ tokenPredictor });

const rates = [];
let tokens = [];
for (let r = 0; r < opt.repeat; r++) {
    await sequence.clearHistory();
    tokenPredictor?.updateInputTokens(prompt); /* what LlamaCompletion does: it looks up in the input (the prompt) */
    tokens = [];
    let first = 0;
    for await (const t of sequence.evaluate(prompt, { temperature: 0 })) {
        if (!tokens.length) first = performance.now();
        tokens.push(t);
        if (tokens.length === opt.gen) break;
    }
    rates.push((tokens.length - 1) / ((performance.now() - first) / 1e3));
}
rates.sort((a, b) => a - b);
const p = sequence.tokenPredictions;
console.log(JSON.stringify({ backend: opt.gpu, model: opt.model, prompt_tokens: prompt.length, gen_tokens: opt.gen,
    spec_tokens: opt.spec, decode_tok_s: rates[Math.floor(rates.length / 2)], decode_runs: rates,
    validated: p.validated, refuted: p.refuted, tokens }));
await context.dispose();
await model.dispose();
await llama.dispose();
