#!/usr/bin/env node
// The agent workload through the OpenAI API: N agents at once, each R rounds of a tool loop on a
// shared system prompt (thinking off, greedy, tools offered), against any OpenAI-compatible server
// (cinder serve, or scripts/peer_server.mjs for llama.cpp). Every round streams (TTFT and
// inter-token latency are measured at the client), sends back the assistant message and a tool
// result. Prints aggregate decode tok/s, TTFT / ITL p50 / p99, the cache hit rate; --json for
// scripts.
//
//   node scripts/serve_agents.mjs --url http://127.0.0.1:8080 [--agents 8] [--rounds 4]
//        [--system-tokens 2000] [--tool-tokens 40] [--gen 16] [--check-serial N] [--check-cache] [--json]
//
// --check-serial N replays N of the recorded requests (spread over agents and rounds, all when
// N >= their count) one at a time afterwards and fails unless each greedy reply is the same as it
// was among the others (batching invisible to the math). --check-cache fails unless /v1/cache
// shows nothing running, no pinned page and no page held outside the cache afterwards. Exit status
// 1 on any failed request or check.
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(root, "third_party/npm/package.json"));
const { default: OpenAI } = await import(pathToFileURL(require.resolve("openai")).href);

const arg = (name, def) => { const i = process.argv.indexOf(name); return i > 0 ? process.argv[i + 1] : def; };
const url = arg("--url", "http://127.0.0.1:8080");
const agents = Number(arg("--agents", "8")), rounds = Number(arg("--rounds", "4"));
const systemTokens = Number(arg("--system-tokens", "2000")), toolTokens = Number(arg("--tool-tokens", "40"));
const gen = Number(arg("--gen", "16")), checkSerial = Number(arg("--check-serial", "0"));
const checkCache = process.argv.includes("--check-cache"), json = process.argv.includes("--json");
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: arg("--api-key", "none"), maxRetries: 0, timeout: 3600e3 });

// Words that are one token each in Qwen3's vocabulary, so "N tokens" of text is about N tokens.
const words = ["alpha", " beta", " gamma", " delta", " file", " line", " code", " test", " build", " run"];
const text = (n, seed) => Array.from({ length: n }, (_, i) => words[(i * 7 + seed) % words.length]).join("");

const system = "You are a coding agent. Use the tools to inspect the repository. Rules:" + text(systemTokens, 1);
const tools = [{ type: "function", function: { name: "read_file", description: "Read a file",
    parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } } }];

async function request(messages) { // one streamed round: text, usage, client-side timings
    const t0 = performance.now();
    const stream = await client.chat.completions.create({ model: "any", messages, tools, temperature: 0, max_tokens: gen,
        stream: true, stream_options: { include_usage: true } });
    let content = "", usage = null, finish = null, first = 0, last = 0, calls = [];
    const gaps = [];
    for await (const ch of stream) {
        if (ch.usage) usage = ch.usage;
        for (const c of ch.choices) {
            const piece = c.delta.content || c.delta.reasoning_content || "";
            if (piece || c.delta.tool_calls) {
                const t = performance.now();
                if (!first) first = t; else gaps.push(t - last);
                last = t;
            }
            if (c.delta.content) content += c.delta.content;
            if (c.delta.tool_calls) calls.push(...c.delta.tool_calls);
            if (c.finish_reason) finish = c.finish_reason;
        }
    }
    return { content, calls, usage, finish, ttft: (first || performance.now()) - t0, gaps, e2e: performance.now() - t0 };
}

const recorded = []; // {messages, content} of every request, for the serial replay
const stats = { ttft: [], itl: [], completion: 0, prompt: 0, cached: 0, failed: 0, errors: [] };

async function agent(a) {
    const messages = [{ role: "system", content: system }, { role: "user", content: `Task ${a}: fix the failing test in module ${a}.` }];
    for (let r = 0; r < rounds; r++) {
        const sent = structuredClone(messages);
        let res;
        try { res = await request(messages); } catch (e) { stats.failed++; stats.errors.push(String(e)); return; }
        recorded.push({ agent: a, round: r, messages: sent, content: res.content });
        stats.ttft.push(res.ttft);
        stats.itl.push(...res.gaps);
        stats.completion += res.usage?.completion_tokens ?? 0;
        stats.prompt += res.usage?.prompt_tokens ?? 0;
        stats.cached += res.usage?.prompt_tokens_details?.cached_tokens ?? 0;
        const id = res.calls[0]?.id ?? `call_${a}_${r}`;
        messages.push({ role: "assistant", content: res.content || null, tool_calls: res.calls.length ? res.calls
            : [{ id, type: "function", function: { name: "read_file", arguments: JSON.stringify({ path: `src/m${a}_${r}.c` }) } }] });
        messages.push({ role: "tool", tool_call_id: id, content: `// src/m${a}_${r}.c` + text(toolTokens, a * 31 + r) });
    }
}

const pct = (v, p) => { if (!v.length) return 0; const s = [...v].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };

const t0 = performance.now();
await Promise.all(Array.from({ length: agents }, (_, a) => agent(a)));
const wall = (performance.now() - t0) / 1e3;
const out = { agents, rounds, system_tokens: systemTokens, gen, wall_s: wall, requests: recorded.length, failed: stats.failed,
    decode_tok_s_total: stats.completion / wall, ttft_ms_p50: pct(stats.ttft, 0.5), ttft_ms_p99: pct(stats.ttft, 0.99),
    itl_ms_p50: pct(stats.itl, 0.5), itl_ms_p99: pct(stats.itl, 0.99), prompt_tokens: stats.prompt, cached_tokens: stats.cached,
    hit_rate: stats.prompt ? stats.cached / stats.prompt : 0 };

let ok = stats.failed === 0;
if (checkSerial > 0) { // the same requests one at a time: the same greedy replies
    const step = Math.max(1, Math.floor(recorded.length / checkSerial));
    let checked = 0, differ = 0;
    for (let i = 0; i < recorded.length && checked < checkSerial; i += step, checked++) {
        const res = await request(recorded[i].messages);
        if (res.content !== recorded[i].content) {
            differ++;
            if (differ <= 3) console.error(`serial replay differs: agent ${recorded[i].agent} round ${recorded[i].round}:\n  batched: ${JSON.stringify(recorded[i].content)}\n  alone:   ${JSON.stringify(res.content)}`);
        }
    }
    out.serial_checked = checked;
    out.serial_differ = differ;
    ok &&= differ === 0;
}
if (checkCache) {
    // the server publishes its state once per engine step: give it a moment to settle
    let c, clean = false;
    for (let i = 0; i < 20 && !clean; i++) {
        if (i) await new Promise((r) => setTimeout(r, 100));
        c = await (await fetch(`${url}/v1/cache`)).json();
        clean = c.running === 0 && c.waiting === 0 && c.gpu.pinned === 0 && c.gpu.private === 0 && c.gpu.free + c.gpu.cached === c.gpu.pages;
    }
    out.cache = c;
    if (!clean) console.error(`/v1/cache after the run is not clean: ${JSON.stringify(c)}`);
    ok &&= clean;
}
if (stats.errors.length) console.error(`failed requests (${stats.failed}): ${stats.errors.slice(0, 3).join(" | ")}`);
if (json) console.log(JSON.stringify(out));
else {
    console.log(`${agents} agents x ${rounds} rounds, ${systemTokens}-token system prompt, ${gen} tokens per reply: ${out.requests} requests in ${wall.toFixed(1)} s, ${out.failed} failed`);
    console.log(`decode ${out.decode_tok_s_total.toFixed(2)} tok/s total | TTFT p50 ${out.ttft_ms_p50.toFixed(0)} ms p99 ${out.ttft_ms_p99.toFixed(0)} ms | ` +
        `ITL p50 ${out.itl_ms_p50.toFixed(0)} ms p99 ${out.itl_ms_p99.toFixed(0)} ms | cache hit ${(100 * out.hit_rate).toFixed(1)}% (${out.cached_tokens}/${out.prompt_tokens})`);
    if (checkSerial) console.log(`serial replay: ${out.serial_checked} requests, ${out.serial_differ} differ`);
}
process.exit(ok ? 0 : 1);
