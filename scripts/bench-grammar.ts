/**
 * What grammar-constrained decoding costs on the host per step and request: `OutputConstraint.next()`
 * (trie walk + the vocabulary-sized mask) against a brute-force pass that feeds every token's text,
 * along a JSON answer of a schema (and of the same schema with patterns, a format and numeric bounds; and
 * one with unique items, a step and a tuple; one with counted runs; and of a GBNF grammar of the same shape), on the story model's vocabulary and on a synthetic 150k-token one
 * (words with and without a leading space, digit runs, JSON punctuation runs, the 256 bytes; seeded).
 * Medians and means of the per-step times over 3 passes, each a new request (so its own empty mask
 * cache); run it twice, the machines are noisy.
 *
 *   npx tsx scripts/bench-grammar.ts [LABEL]     (LABEL: run only the schemas whose label holds it, e.g. unique)
 */
import { grammarFeed, grammarStart, type GrammarState, type OutputGrammar } from "../src/engine/grammar.ts";
import { OutputConstraint, TokenTrie } from "../src/engine/output-constraint.ts";
import { tokenTextOf } from "../src/model/config.ts";
import { loadModel } from "../src/model/load.ts";
import { mean, median, synthetic, syntheticPieces, tokenize, tokenizeBytes } from "./bench-vocab.ts";

const GRAMMAR: OutputGrammar = {
  kind: "json",
  schema: {
    type: "object",
    properties: { city: { type: "string" }, days: { type: "integer" }, unit: { enum: ["celsius", "fahrenheit"] }, tags: { type: "array", items: { type: "string" } } },
    required: ["city", "unit"],
    additionalProperties: false,
  },
};
const ANSWER = '{"city": "San Francisco", "days": 12, "unit": "celsius", "tags": ["fog", "bay area", "summer"]}';
/** The same answer under patterns, a format and numeric bounds (no free string: the trie's plain-text shortcut never applies). */
const PATTERNED: OutputGrammar = {
  kind: "json",
  schema: {
    type: "object",
    properties: {
      city: { type: "string", pattern: "^[A-Z][a-z]+( [A-Z][a-z]+)*$" }, days: { type: "integer", minimum: 1, maximum: 30 }, day: { type: "string", format: "date" },
      tags: { type: "array", items: { type: "string", pattern: "[a-z]", maxLength: 20 } },
    },
    required: ["city", "day"],
    additionalProperties: false,
  },
};
const PATTERNED_ANSWER = '{"city": "San Francisco", "days": 12, "day": "2026-11-30", "tags": ["fog", "bay area", "summer"]}';

/** Unique items (strings, one a prefix of another), a step and a tuple: every such item is checked by the duplicate guard. */
const UNIQUE: OutputGrammar = {
  kind: "json",
  schema: {
    type: "object",
    properties: {
      city: { type: "string" }, days: { type: "integer", multipleOf: 3 }, pair: { type: "array", prefixItems: [{ type: "number" }, { type: "number" }], items: false },
      tags: { type: "array", uniqueItems: true, items: { type: "string" } },
    },
    required: ["city"],
    additionalProperties: false,
  },
};
/**
 * Counted runs (`{m,n}`), as tool-name and length-capping patterns are written: no character leads such
 * a pattern back to where it is, so only the run depth (regex-nfa.ts runRooms) lets the trie take
 * subtrees whole; and three of them as anyOf branches.
 */
const COUNTED: OutputGrammar = {
  kind: "json",
  schema: {
    type: "object",
    properties: {
      name: { type: "string", pattern: "^[a-zA-Z0-9_-]{1,64}$" }, note: { type: "string", pattern: "^[^<>]{1,200}$" },
      code: { anyOf: [{ type: "string", pattern: "^[A-Z]{2}-[0-9]{1,8}$" }, { type: "string", pattern: "^[a-z]{3,12}$" }, { type: "string", pattern: "^[^<>]{1,40}!$" }] },
    },
    required: ["name", "note", "code"],
    additionalProperties: false,
  },
};
const COUNTED_ANSWER = '{"name": "get_weather-2", "note": "Sunny, light wind from the west.", "code": "SF-94103"}';
/** Characters past ASCII in a free string and in an enum, over a byte-level vocabulary where some are whole tokens and some pieces. */
const WIDE: OutputGrammar = {
  kind: "json",
  schema: {
    type: "object",
    properties: { city: { type: "string" }, unit: { enum: ["摄氏度", "华氏度"] }, note: { type: "string", pattern: "^[一-龥]+$" } },
    required: ["city", "unit"],
    additionalProperties: false,
  },
};
const WIDE_ANSWER = '{"city": "東京 and 名古屋, 旧金山", "unit": "摄氏度", "note": "天气晴朗"}';
/** ANSWER's shape as a GBNF grammar (gbnf.ts): its free strings are a character class in a loop, no plain-text shortcut. */
const GBNF: OutputGrammar = {
  kind: "gbnf",
  grammar: String.raw`
root   ::= "{" ws "\"city\":" ws string ("," ws "\"days\":" ws int)? "," ws "\"unit\":" ws ("\"celsius\"" | "\"fahrenheit\"") tags? ws "}"
tags   ::= "," ws "\"tags\":" ws "[" ws (string ("," ws string)*)? ws "]"
string ::= "\"" [^"\\]* "\""
int    ::= "-"? [0-9]+
ws     ::= [ ]?
`,
};
/** The same, its strings in llama.cpp's json.gbnf idiom: a class in a repeated alternation with escapes. */
const GBNF_ESCAPES: OutputGrammar = {
  kind: "gbnf",
  grammar: (GBNF as { grammar: string }).grammar.replace(String.raw`string ::= "\"" [^"\\]* "\""`, String.raw`string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""`),
};
const UNIQUE_ANSWER = '{"city": "San Francisco", "days": 12, "pair": [37.77, -122.42], "tags": ["fog", "bay area", "summer", "bay"]}';

function bench(name: string, texts: string[], grammar: OutputGrammar, answer: string, bytes?: readonly Uint8Array[]): void {
  const t0 = performance.now();
  const trie = new TokenTrie(texts, bytes && ((id) => bytes[id]));
  const buildMs = performance.now() - t0;
  const ids = bytes ? tokenizeBytes(answer, bytes) : tokenize(answer, texts);
  const eos = [0];
  const trieMs: number[] = [];
  const bruteMs: number[] = [];
  let allowed = 0;
  for (let rep = 0; rep < 3; rep++) {
    const c = new OutputConstraint(grammar, trie, eos);
    let state: GrammarState = grammarStart(grammar);
    for (let k = 0; k <= ids.length; k++) {
      const a = performance.now();
      const barred = c.next(ids.slice(0, k), 0);
      trieMs.push(performance.now() - a);
      if (rep === 0) allowed += barred.allowedCount;
      const b = performance.now();
      let n = 0;
      for (const t of texts) if (t !== "" && !t.includes("\uFFFD") && grammarFeed(state, t).length > 0) n++;
      bruteMs.push(performance.now() - b);
      if (n < 0) throw new Error("unreachable");
      // (The brute force feeds whole texts only: along a pieced answer it stays where the last one left it.)
      if (k < ids.length && !texts[ids[k]].includes("\uFFFD")) state = grammarFeed(state, texts[ids[k]]);
    }
  }
  console.log(
    `${name.padEnd(22)} vocab ${String(texts.length).padStart(6)}  answer ${ids.length} tokens  trie built in ${buildMs.toFixed(0)} ms` +
      `\n    next(): median ${median(trieMs).toFixed(3)} ms/step, mean ${mean(trieMs).toFixed(3)}, max ${Math.max(...trieMs).toFixed(1)}` +
      `  brute force: median ${median(bruteMs).toFixed(3)}, mean ${mean(bruteMs).toFixed(3)}` +
      `  (medians ${(median(bruteMs) / median(trieMs)).toFixed(1)}x)  tokens allowed per step: ${(allowed / (ids.length + 1)).toFixed(0)}`,
  );
}

const model = await loadModel(new URL("../models/stories260K.gguf", import.meta.url).pathname);
const story = Array.from({ length: model.config.vocabSize }, (_, id) => tokenTextOf(model.tokenizer, id)), big = synthetic(150_000);
// `npx tsx scripts/bench-grammar.ts unique` runs the schemas whose label holds "unique" only.
const only = process.argv[2] ?? "";
for (const [label, grammar, answer] of [["", GRAMMAR, ANSWER], [" patterned", PATTERNED, PATTERNED_ANSWER], [" unique", UNIQUE, UNIQUE_ANSWER], [" gbnf", GBNF, ANSWER], [" gbnf escapes", GBNF_ESCAPES, ANSWER], [" counted", COUNTED, COUNTED_ANSWER]] as const) {
  if (!label.includes(only)) continue;
  bench(`stories260K${label}`, story, grammar, answer);
  bench(`synthetic 150k${label}`, big, grammar, answer);
}
if (" wide".includes(only)) {
  // The same byte-level vocabulary with its pieces placed (bytes given) and left out (texts only).
  const pieces = syntheticPieces(150_000);
  bench("150k pieces wide", pieces.texts, WIDE, WIDE_ANSWER, pieces.bytes);
  bench("150k pieces plain", pieces.texts, GRAMMAR, ANSWER, pieces.bytes);
  bench("150k no pieces plain", pieces.texts, GRAMMAR, ANSWER);
}
