/**
 * Jump-forward decoding (EngineOptions.jumpForward): what it saves and what it costs.
 *
 * 1. Host side, on the story model's 512-token vocabulary and a synthetic 150k one: a tool call and a
 *    JSON answer (each with JSON's whitespace free and compact; the call also in Kimi K2's and
 *    DeepSeek V3.1's formats, compact, and in GLM's and Qwen3-Coder's), and a timestamp under a regex,
 *    written token by token as a model would (greedy longest-match tokens of the answer), with
 *    `OutputConstraint.forced()` after each sampled token appending what the grammar forces.
 *    Reports the steps needed with and without jumps and the time forced() takes per step.
 * 2. The engine, stories260K on the reference backend and on WebGPU (Dawn; lavapipe without a GPU):
 *    a forced tool call (enum arguments; whitespace free and compact) from one request and from 8 at
 *    once (temperature 0.8, seeds 1–8), jump-forward on and off; medians of 3 runs of the wall time,
 *    steps and tokens.
 *
 *   npx tsx scripts/bench-jump-forward.ts
 */
import { createReferenceBackend } from "../src/backend/reference/index.ts";
import type { Backend } from "../src/backend/types.ts";
import { createWebGpuBackend } from "../src/backend/webgpu/index.ts";
import { createEngine } from "../src/engine/engine-factory.ts";
import type { OutputGrammar } from "../src/engine/grammar.ts";
import { OutputConstraint, TokenTrie } from "../src/engine/output-constraint.ts";
import { tokenTextOf } from "../src/model/config.ts";
import { loadModel } from "../src/model/load.ts";
import { mean, median, synthetic, tokenize } from "./bench-vocab.ts";

const TOOL: OutputGrammar = {
  kind: "tool_calls", parallel: false,
  tools: [{
    name: "get_weather",
    parameters: {
      type: "object", additionalProperties: false, required: ["city", "unit"],
      properties: { city: { enum: ["Paris", "London", "Tokyo", "San Francisco"] }, unit: { enum: ["celsius", "fahrenheit"] } },
    },
  }, { name: "get_time", parameters: { type: "object", properties: { zone: { type: "string" } }, required: ["zone"], additionalProperties: false } }],
};
const TOOL_ANSWER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "San Francisco", "unit": "fahrenheit"}}\n</tool_call>';
const KIMI_ANSWER = '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "San Francisco", "unit": "fahrenheit"}<|tool_call_end|><|tool_calls_section_end|>';
const GLM_ANSWER = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>San Francisco</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>fahrenheit</arg_value>\n</tool_call>";
const DEEPSEEK_ANSWER = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "San Francisco", "unit": "fahrenheit"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>';
const QWEN_ANSWER = "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>";
const RECORD: OutputGrammar = {
  kind: "json",
  schema: {
    type: "object", additionalProperties: false, required: ["status", "customer", "items"],
    properties: {
      status: { enum: ["pending", "paid", "shipped"] }, customer: { type: "string" },
      items: { type: "array", items: { type: "object", additionalProperties: false, required: ["sku", "quantity"], properties: { sku: { type: "string" }, quantity: { type: "integer" } } } },
    },
  },
};
const STAMP: OutputGrammar = { kind: "regex", pattern: "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z" };
const STAMP_ANSWER = "2026-12-02T11:45:09Z";
const compact = (g: OutputGrammar): OutputGrammar => ({ ...g, whitespace: "compact" } as OutputGrammar);
const RECORD_ANSWER = '{"status": "shipped", "customer": "Ada", "items": [{"sku": "A-1", "quantity": 2}, {"sku": "B-7", "quantity": 1}]}';

/** Writes `answer` as a model would, jumping where the grammar forces text; steps = sampled tokens. */
function hostRun(texts: readonly string[], trie: TokenTrie, grammar: OutputGrammar, answer: string, jump: boolean): { steps: number; tokens: number; forcedMs: number[] } {
  const c = new OutputConstraint(grammar, trie, [0]);
  const out: number[] = [];
  let written = "";
  let steps = 0;
  const forcedMs: number[] = [];
  while (written.length < answer.length) {
    // The model's next token: the longest one of the answer's rest (what the grammar allows, since the answer fits).
    const next = tokenize(answer.slice(written.length), texts)[0];
    out.push(next);
    written += texts[next];
    steps++;
    if (!jump) continue;
    const t0 = performance.now();
    const forced = c.forced(out, 0, 1000);
    forcedMs.push(performance.now() - t0);
    for (const id of forced) {
      out.push(id);
      written += texts[id];
    }
    if (!answer.startsWith(written)) throw new Error(`The jump left the answer: ${JSON.stringify(written)}`);
  }
  return { steps, tokens: out.length, forcedMs };
}

const model = await loadModel(new URL("../models/stories260K.gguf", import.meta.url).pathname);
const story = Array.from({ length: model.config.vocabSize }, (_, id) => tokenTextOf(model.tokenizer, id));
console.log("## Host: steps to write an answer, and forced() per sampled token");
// The formats' tags are single tokens of their models' vocabularies (DeepSeek's fullwidth bars exist
// nowhere else): each vocabulary gets them too.
const TAGS = [
  "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
  "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
];
for (const [vocabName, texts] of [["stories260K+tags", [...story, ...TAGS]], ["synthetic 150k+tags", [...synthetic(150_000), ...TAGS]]] as [string, string[]][]) {
  const trie = new TokenTrie(texts);
  const cases = [
    ["tool call", TOOL, TOOL_ANSWER], ["  compact", compact(TOOL), TOOL_ANSWER],
    ["  kimi_k2", compact({ ...TOOL, format: "kimi_k2" } as OutputGrammar), KIMI_ANSWER], ["  glm45", { ...TOOL, format: "glm45" } as OutputGrammar, GLM_ANSWER],
    ["  deepseek", compact({ ...TOOL, format: "deepseek_v31" } as OutputGrammar), DEEPSEEK_ANSWER], ["  qwen3coder", { ...TOOL, format: "qwen3_coder" } as OutputGrammar, QWEN_ANSWER],
    ["json record", RECORD, RECORD_ANSWER], ["  compact", compact(RECORD), RECORD_ANSWER], ["regex stamp", STAMP, STAMP_ANSWER],
  ] as const;
  for (const [name, grammar, answer] of cases) {
    const off = hostRun(texts, trie, grammar, answer, false);
    const runs = [0, 1, 2].map(() => hostRun(texts, trie, grammar, answer, true));
    const ms = runs.flatMap((r) => r.forcedMs);
    console.log(
      `${vocabName.padEnd(20)} ${name.padEnd(12)}  steps ${String(off.steps).padStart(3)} → ${String(runs[0].steps).padStart(3)} (${(off.steps / runs[0].steps).toFixed(2)}x)` +
        `  tokens ${off.tokens} → ${runs[0].tokens}  forced(): median ${median(ms).toFixed(3)} ms, mean ${mean(ms).toFixed(3)}, max ${Math.max(...ms).toFixed(2)}`,
    );
  }
}

const prompt = model.tokenizer.encode("Once upon a time, Lily wanted to know the weather in a big city.", { addBos: true });

async function engineRun(backend: Backend, grammar: OutputGrammar, jumpForward: boolean, requests: number): Promise<{ ms: number; steps: number; tokens: number; jumped: number }> {
  let steps = 0;
  const e = createEngine(backend, model, { numBlocks: 128, jumpForward, onStep: () => steps++ });
  try {
    const t0 = performance.now();
    const results = await Promise.all(Array.from({ length: requests }, (_, i) =>
      e.submit({ prompt, maxTokens: 200, grammar, ...(requests === 1 ? { temperature: 0 } : { temperature: 0.8, seed: i + 1 }) }).result));
    const ms = performance.now() - t0;
    return { ms, steps, tokens: results.reduce((n, r) => n + r.completionTokens, 0), jumped: e.metrics.jumpForwardTokens };
  } finally {
    await e.stop();
  }
}

console.log("\n## Engine: stories260K, a forced tool call (enum arguments), medians of 3 runs");
const gpu = await createWebGpuBackend().catch((e: unknown) => {
  console.log(`(WebGPU unavailable: ${e instanceof Error ? e.message : String(e)})`);
  return undefined;
});
for (const [label, make] of [["reference", () => createReferenceBackend()], ...(gpu ? [["webgpu", () => gpu]] as const : [])] as const) {
  for (const [spacing, grammar] of [["any", TOOL], ["compact", compact(TOOL)]] as const) for (const requests of [1, 8]) {
    const row: string[] = [];
    const wall: Record<string, number> = {};
    for (const jump of [false, true]) {
      const runs = [];
      for (let rep = 0; rep < 3; rep++) runs.push(await engineRun(make(), grammar, jump, requests));
      const ms = median(runs.map((r) => r.ms));
      wall[String(jump)] = ms;
      const r = runs[0];
      row.push(`${jump ? "on " : "off"}: ${ms.toFixed(0).padStart(6)} ms  ${String(r.steps).padStart(4)} steps  ${r.tokens} tokens (${r.jumped} jumped)`);
    }
    console.log(`${label.padEnd(9)} ${spacing.padEnd(7)} ${String(requests).padStart(2)} req  ${row.join("  |  ")}  wall off/on ${(wall.false / wall.true).toFixed(2)}x`);
  }
}
