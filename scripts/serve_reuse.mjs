#!/usr/bin/env node
// Prefix reuse through the real chat template, measured through the OpenAI API: a multi-turn chat
// and an agent tool loop (thinking off) against a running `cinder serve` (or any OpenAI-compatible
// server that reports usage.prompt_tokens_details.cached_tokens). Per turn it prints the prompt,
// the cached tokens, and the ideal: everything before the new message, i.e. the previous prompt
// plus the previous reply (its end token excluded: it was never fed). JSON with --json.
//   node scripts/serve_reuse.mjs --url http://127.0.0.1:8080 [--turns 6] [--max-tokens 48] [--json]
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(root, "third_party/npm/package.json"));
const { default: OpenAI } = await import(pathToFileURL(require.resolve("openai")).href);

const arg = (name, def) => { const i = process.argv.indexOf(name); return i > 0 ? process.argv[i + 1] : def; };
const url = arg("--url", "http://127.0.0.1:8080"), turns = Number(arg("--turns", "6"));
const maxTokens = Number(arg("--max-tokens", "48")), json = process.argv.includes("--json");
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: arg("--api-key", "none"), maxRetries: 0 });
const base = { model: "any", temperature: 0, max_tokens: maxTokens };

const tools = [{ type: "function", function: { name: "read_file", description: "Read a file of the repository",
    parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } } }];

async function run(name, next) {
    const messages = [{ role: "system", content: `Session ${name} ${Date.now()}. You are a careful assistant. ` + "Be brief. ".repeat(30) },
        { role: "user", content: "Let us begin: what is in README.md?" }];
    const rows = [];
    let prev = null;
    for (let t = 1; t <= turns; t++) {
        const r = await client.chat.completions.create({ ...base, messages, ...(name === "agent" ? { tools } : {}) });
        const u = r.usage, msg = r.choices[0].message;
        const eog = r.choices[0].finish_reason !== "length" ? 0 : 1; // a length stop's last token was not fed either
        const ideal = prev ? prev.prompt + prev.completion - prev.unfed : 0;
        rows.push({ turn: t, prompt_tokens: u.prompt_tokens, cached_tokens: u.prompt_tokens_details.cached_tokens, ideal,
            reply_tokens: u.completion_tokens });
        prev = { prompt: u.prompt_tokens, completion: u.completion_tokens, unfed: eog };
        messages.push({ role: "assistant", content: msg.content, ...(msg.tool_calls ? { tool_calls: msg.tool_calls } : {}) });
        messages.push(next(t, msg));
    }
    return rows;
}

const chat = await run("chat", (t) => ({ role: "user", content: `Thanks. Question ${t + 1}: tell me more.` }));
const agent = await run("agent", (t, msg) => msg.tool_calls
    ? { role: "tool", tool_call_id: msg.tool_calls[0].id, content: `file contents, round ${t}` }
    : { role: "user", content: `<tool_response>\nfile contents, round ${t}\n</tool_response>` });
if (json) {
    console.log(JSON.stringify({ chat, agent }));
} else {
    for (const [name, rows] of [["chat", chat], ["agent tool loop", agent]]) {
        console.log(`${name}: turn  prompt  cached  ideal  reply  cached/ideal`);
        for (const r of rows)
            console.log(`  ${String(r.turn).padStart(4)} ${String(r.prompt_tokens).padStart(7)} ${String(r.cached_tokens).padStart(7)} ` +
                `${String(r.ideal).padStart(6)} ${String(r.reply_tokens).padStart(6)}  ${r.ideal ? (100 * r.cached_tokens / r.ideal).toFixed(1) + "%" : "-"}`);
    }
}
