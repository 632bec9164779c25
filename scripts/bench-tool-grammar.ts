/**
 * What a forced tool call (`tool_choice: "required"`) costs an output grammar as the tool count grows:
 * the time `OutputConstraint.next()` takes per token (trie walk and mask, jump-forward's forced text
 * included) along one whole call to `get_weather_v2`, among 10, 50 and 150 tools whose names share
 * prefixes (`get`, `get_weather`, `get_weather_v2`, …, then `set…`, `list…`), each with its own
 * parameters, in three syntaxes (hermes: one JSON object per call; mistral and glm45: tags around the
 * name). Over stories260K's vocabulary (512 tokens) and a synthetic one (bench-vocab.ts, plus each
 * format's tags as tokens). Medians over the masks of a call, median of `--repeats` rounds (each a new
 * request, so an empty mask cache); "max" is the slowest mask of the call (at the name). The
 * fingerprint hashes every mask's allowed tokens: equal before and after a grammar change means the
 * same tokens were allowed at every step. Figures: docs/results/bench-tool-grammar.md.
 *
 *   ./node_modules/.bin/deno run -A --no-check scripts/bench-tool-grammar.ts [--repeats 5] [--vocab 150000]
 */
import { parseArgs } from "../src/cli/args.ts";
import { cliArgs } from "../src/runtime/env.ts";
import { loadModel } from "../src/model/load.ts";
import { tokenTextOf } from "../src/model/config.ts";
import { OutputConstraint, TokenTrie } from "../src/engine/output-constraint.ts";
import type { OutputGrammar, ToolCallSyntax } from "../src/engine/grammar-types.ts";
import { median, synthetic } from "./bench-vocab.ts";

const flags = parseArgs(cliArgs(), {
  repeats: { kind: "int", min: 1, help: "rounds per case (median reported)" },
  vocab: { kind: "int", min: 1000, help: "size of the synthetic vocabulary" },
});
const repeats = flags.repeats ?? 5;

const BASES = ["get", "set", "list", "find", "search", "create", "update", "delete", "fetch", "send"];
const SUFFIXES = ["", "_weather", "_weather_v2", "_weather_v2_beta", "_weather_forecast", "_user", "_user_id", "_user_profile", "_file", "_file_info", "_file_info_v2", "_item", "_items", "_item_count", "_status"];

/** `n` tools named base-major (`get`, `get_weather`, …, `set`, …), each with parameters of its own. */
function tools(n: number): { name: string; parameters: Record<string, unknown> }[] {
  const names = BASES.flatMap((b) => SUFFIXES.map((s) => b + s)).slice(0, n);
  return names.map((name, i) => ({
    name,
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, days: { type: "integer" }, unit: { enum: ["celsius", "fahrenheit"] }, [`opt_${i}`]: { type: "boolean" } },
      required: ["city"],
      additionalProperties: false,
    },
  }));
}

/** The call each format writes to get_weather_v2 with city Paris and 3 days. */
const CALLS: Record<string, string> = {
  hermes: '<tool_call>\n{"name": "get_weather_v2", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>',
  mistral: '[TOOL_CALLS]get_weather_v2[ARGS]{"city": "Paris", "days": 3}',
  glm45: "<tool_call>get_weather_v2\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
};
const TAGS = ["<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"];

/** FNV-1a over a word list. */
function fnv(h: number, words: Int32Array): number {
  for (const w of words) h = Math.imul(h ^ w, 16777619) >>> 0;
  return h;
}

/** The longest token spelling the start of `rest` that `allows` takes, or undefined. */
function nextToken(rest: string, byText: ReadonlyMap<string, number>, allows: (id: number) => boolean): number | undefined {
  for (let len = Math.min(32, rest.length); len > 0; len--) {
    const id = byText.get(rest.slice(0, len));
    if (id !== undefined && allows(id)) return id;
  }
  return undefined;
}

function bench(vocabName: string, texts: readonly string[], eos: readonly number[]): void {
  const trie = new TokenTrie(texts);
  const byText = new Map<string, number>();
  texts.forEach((t, id) => t !== "" && !byText.has(t) && byText.set(t, id));
  for (const format of Object.keys(CALLS)) {
    for (const n of [10, 50, 150]) {
      const grammar: OutputGrammar = { kind: "tool_calls", tools: tools(n), parallel: false, format: format as ToolCallSyntax };
      const medians: number[] = [], maxes: number[] = [], totals: number[] = [];
      let print = 0, masks = 0;
      // Round -1 warms the code up and is not counted.
      for (let r = -1; r < repeats; r++) {
        const c = new OutputConstraint(grammar, trie, eos);
        const times: number[] = [];
        const out: number[] = [];
        let h = 2166136261, rest = CALLS[format];
        for (;;) {
          const t0 = performance.now();
          const mask = c.next(out, 0);
          times.push(performance.now() - t0);
          h = fnv(h, mask.bits);
          if (rest === "") {
            if (!eos.some((e) => mask.allows(e))) throw new Error(`The ${format} call cannot end where it does`);
            break;
          }
          // The longest allowed token spelling what comes next (where text is forced, the mask allows only jump-forward's).
          const id = nextToken(rest, byText, (t) => mask.allows(t));
          if (id === undefined) throw new Error(`No allowed token spells ${JSON.stringify(rest.slice(0, 20))} in the ${format} call`);
          out.push(id);
          rest = rest.slice(texts[id].length);
        }
        if (r < 0) continue;
        medians.push(median(times));
        maxes.push(Math.max(...times));
        totals.push(times.reduce((a, b) => a + b, 0));
        print = h;
        masks = times.length;
      }
      console.log(
        `${vocabName.padEnd(16)} ${format.padEnd(8)} ${String(n).padStart(3)} tools: ${median(medians).toFixed(3)} ms a mask (median), ` +
          `max ${median(maxes).toFixed(2)} ms, call ${median(totals).toFixed(1)} ms (${masks} masks), fingerprint ${print.toString(16).padStart(8, "0")}`,
      );
    }
  }
}

const model = await loadModel(new URL("../models/stories260K.gguf", import.meta.url).pathname);
const story = Array.from({ length: model.config.vocabSize }, (_, id) => tokenTextOf(model.tokenizer, id));
console.log(`median of ${repeats} rounds`);
bench("stories260K", story, model.config.eosTokenIds);
const big = [...synthetic(flags.vocab ?? 150_000), ...TAGS, "_", "_weather", "_v2", "Paris", " Paris"];
bench(`synthetic ${Math.round(big.length / 1000)}k`, big, [0]);
