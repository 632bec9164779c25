/**
 * What `grammarStateKey` (src/engine/grammar-key.ts) costs per state: the states an output grammar
 * passes through while a JSON value is written character by character (precomputed), each keyed as
 * output-constraint.ts keys them for its mask cache, with one `ObjectIds` per pass (one per request,
 * as there). Two schemas: the host-overhead bench's array of strings (a shallow frame stack) and an
 * object nesting arrays of objects (a deep one).
 *
 *   npx tsx scripts/bench-grammar-key.ts              # 15 passes each, median µs per key
 *   npx tsx scripts/bench-grammar-key.ts --runs 30
 */
import type { JsonSchema } from "../src/engine/json-schema-node.ts";
import { type GrammarState, grammarStart, grammarStateKey, grammarStep, ObjectIds } from "../src/engine/grammar.ts";
import { cliArgs } from "../src/runtime/env.ts";

const SHALLOW = { type: "array", items: { type: "string" } };
const LEAF = { type: "object", properties: { name: { type: "string", maxLength: 40 }, score: { type: "number", minimum: 0, maximum: 100 } }, required: ["name", "score"] };
const DEEP = {
  type: "object", required: ["groups"],
  properties: { groups: { type: "array", items: { type: "object", required: ["title", "rows"], properties: { title: { type: "string" }, rows: { type: "array", items: { type: "array", items: LEAF } } } } } },
};

const leaf = (i: number) => `{"name": "item number ${i} of the list", "score": ${(i * 7.25) % 100}}`;
const SHALLOW_TEXT = JSON.stringify(Array.from({ length: 30 }, (_, i) => `string number ${i}, with some words in it`));
const DEEP_TEXT = `{"groups": [${Array.from({ length: 4 }, (_, g) => `{"title": "group ${g}", "rows": [[${leaf(g)}, ${leaf(g + 1)}], [${leaf(g + 2)}]]}`).join(", ")}]}`;

/** Every state the grammar is in while `text` is written (the first before any character). */
function statesOf(schema: JsonSchema, text: string): GrammarState[] {
  let state = grammarStart({ kind: "json", schema });
  const out = [state];
  for (const c of text) {
    state = grammarStep(state, c);
    if (state.length === 0) throw new Error(`The schema refuses ${JSON.stringify(c)} in ${JSON.stringify(text.slice(0, 60))}…`);
    out.push(state);
  }
  return out;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

function main(): void {
  const args = cliArgs();
  const at = args.indexOf("--runs");
  const runs = at >= 0 ? Number(args[at + 1]) : 15;
  for (const [name, schema, text] of [["shallow", SHALLOW, SHALLOW_TEXT], ["deep", DEEP, DEEP_TEXT]] as const) {
    const states = statesOf(schema, text);
    let sink = 0;
    const pass = () => {
      const ids = new ObjectIds();
      const t0 = performance.now();
      for (const s of states) sink += grammarStateKey(s, ids).length;
      return ((performance.now() - t0) * 1000) / states.length;
    };
    for (let i = 0; i < 5; i++) pass(); // warm-up
    const us = Array.from({ length: runs }, pass);
    const keyLength = grammarStateKey(states[states.length >> 1], new ObjectIds()).length;
    console.log(`${name}: ${states.length} states, key of ${keyLength} chars mid-way: median ${median(us).toFixed(3)} µs per key (${runs} passes; ${sink > 0 ? "ok" : "?"})`);
  }
}

main();
