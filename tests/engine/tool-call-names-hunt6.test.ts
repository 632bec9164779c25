/**
 * A forced tool call among many tools (grammar-pick.ts): the tool's name is stepped as one sorted run,
 * in every tool-call syntax, so the state before the name holds a configuration or two, not one per
 * tool; and the grammar accepts exactly what the alternatives stepped one by one accepted (the same
 * grammar with its index taken out): each whole call, no near-miss, and along every text the same
 * aliveness, ends and forced text.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { grammarComplete, grammarStart, grammarStep, type GrammarState } from "../../src/engine/grammar.ts";
import { grammarForcedText } from "../../src/engine/grammar-forced.ts";
import { startGroup } from "../../src/engine/grammar-step.ts";
import { DEEPSEEK, HARMONY, KIMI, MINIMAX, MISTRAL, toolCallGroup, LFM2 } from "../../src/engine/grammar-tool-calls.ts";
import type { Piece, SeqGroup } from "../../src/engine/grammar-frames.ts";
import type { SchemaNode } from "../../src/engine/json-schema.ts";
import { TOOL_CALL_FORMATS, type ToolCallSyntax } from "../../src/engine/grammar-types.ts";
import { GEMMA4_CALL } from "../../src/engine/grammar-gemma4.ts";

const BASES = ["get", "set", "list", "find", "search", "create", "update", "delete", "fetch", "send"];
const SUFFIXES = ["", "_weather", "_weather_v2", "_weather_v2_beta", "_weather_forecast", "_user", "_user_id", "_user_profile", "_file", "_file_info", "_file_info_v2", "_item", "_items", "_item_count", "_status"];
const NAMES = BASES.flatMap((b) => SUFFIXES.map((s) => b + s));
const TOOLS = NAMES.map((name, i) => ({
  name,
  parameters: {
    type: "object", properties: { city: { type: "string" }, days: { type: "integer" }, [`opt_${i}`]: { type: "boolean" } }, required: ["city"], additionalProperties: false,
  },
}));
const SYNTAXES: readonly ToolCallSyntax[] = [...TOOL_CALL_FORMATS, "mistral_pre_v11"];

type Args = readonly (readonly [string, string | number | boolean])[];

/** The text of one call to `name` with `args` in `format`. */
function callText(format: ToolCallSyntax, name: string, args: Args): string {
  const json = `{${args.map(([k, v]) => `${JSON.stringify(k)}: ${JSON.stringify(v)}`).join(", ")}}`;
  const raw = (v: string | number | boolean) => (typeof v === "string" ? v : JSON.stringify(v));
  switch (format) {
    case "hermes": return `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": ${json}}\n</tool_call>`;
    case "llama3_json": return `{"name": ${JSON.stringify(name)}, "parameters": ${json}}`;
    case "kimi_k2": return `${KIMI.sectionBegin}${KIMI.callBegin}functions.${name}:0${KIMI.argsBegin}${json}${KIMI.callEnd}${KIMI.sectionEnd}`;
    case "deepseek_v31": return `${DEEPSEEK.sectionBegin}${DEEPSEEK.callBegin}${name}${DEEPSEEK.sep}${json}${DEEPSEEK.callEnd}${DEEPSEEK.sectionEnd}`;
    case "deepseek_v3": return `${DEEPSEEK.sectionBegin}${DEEPSEEK.callBegin}function${DEEPSEEK.sep}${name}\n\`\`\`json\n${json}\n\`\`\`${DEEPSEEK.callEnd}${DEEPSEEK.sectionEnd}`;
    case "glm45": return `<tool_call>${name}\n${args.map(([k, v]) => `<arg_key>${k}</arg_key>\n<arg_value>${raw(v)}</arg_value>\n`).join("")}</tool_call>`;
    case "qwen3_coder": return `<tool_call>\n<function=${name}>\n${args.map(([k, v]) => `<parameter=${k}>\n${raw(v)}\n</parameter>\n`).join("")}</function>\n</tool_call>`;
    case "minimax_m2": return `${MINIMAX.sectionBegin}\n${MINIMAX.invoke}"${name}">\n${args.map(([k, v]) => `<parameter name="${k}">${raw(v)}</parameter>\n`).join("")}${MINIMAX.invokeEnd}\n${MINIMAX.sectionEnd}`;
    case "mistral": return `${MISTRAL.calls}${name}${MISTRAL.args}${json}`;
    case "mistral_pre_v11": return `${MISTRAL.calls}[{"name": ${JSON.stringify(name)}, "arguments": ${json}}]`;
    case "harmony": return ` to=functions.${name}${HARMONY.channel}commentary json${HARMONY.message}${json}`;
    case "granite": return `<|tool_call|>[{"name": ${JSON.stringify(name)}, "arguments": ${json}}]`;
    case "phi4_mini_json": return `functools[{"name": ${JSON.stringify(name)}, "arguments": ${json}}]`;
    case "lfm2": return `${LFM2.open}[${name}(${args.map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ")})]${LFM2.close}`;
    case "nemotron_json": return `<TOOLCALL>[{"name": ${JSON.stringify(name)}, "arguments": ${json}}]</TOOLCALL>`;
    case "seed_oss": return `<seed:tool_call>\n<function=${name}>\n${args.map(([k, v]) => `<parameter=${k}>${raw(v)}</parameter>\n`).join("")}</function>\n</seed:tool_call>`;
    case "gemma4": {
      const q = GEMMA4_CALL.string;
      return `${GEMMA4_CALL.open}call:${name}{${args.map(([k, v]) => `${k}:${typeof v === "string" ? `${q}${v}${q}` : JSON.stringify(v)}`).join(",")}}${GEMMA4_CALL.close}`;
    }
  }
}

/** Calls the grammar must take: tools whose names are prefixes of one another, and the last one. */
function calls(format: ToolCallSyntax): string[] {
  return [0, 1, 2, 3, 149].map((i) => callText(format, NAMES[i], [["city", "Paris"], ["days", 3], [`opt_${i}`, true]]));
}

/** Near-misses: a name one character too long or short, an unknown name, another tool's parameter. */
function nearMisses(format: ToolCallSyntax): string[] {
  const city: Args = [["city", "Paris"]];
  return [
    callText(format, "get_weather_v2x", city), callText(format, "get_weather_", city), callText(format, "ge", city), callText(format, "got", city),
    callText(format, "get_weather_v2", [["city", "Paris"], ["opt_3", true]]), callText(format, "send_status", [["city", "Paris"], ["opt_0", true]]),
    callText(format, "get", []),
  ];
}

/** `group` with every index and pick taken out: its alternatives stepped one by one, as before them. */
function unindexed(group: SeqGroup): SeqGroup {
  const piece = (p: Piece): Piece => ("group" in p ? { group: unindexed(p.group) } : "node" in p ? { node: plainNode(p.node) } : p);
  return { alts: group.alts.map((ps) => ps.map(piece)), repeat: group.repeat, sep: group.sep };
}
function plainNode(n: SchemaNode): SchemaNode {
  if (n.t === "anyOf") return { t: "anyOf", options: n.options };
  if (n.t === "array" && n.items !== null) return { ...n, items: plainNode(n.items) };
  return n;
}

function start(group: SeqGroup): GrammarState {
  return startGroup({ k: "seq", group, pieces: group.alts[0], i: 0, compact: false, up: null, d: 0 });
}

/** Steps both states along `text`, asserting at each character the same aliveness, end and forced text; whether `text` is taken whole. */
function walkAlike(a: GrammarState, b: GrammarState, text: string, what: string): boolean {
  for (const c of text) {
    [a, b] = [grammarStep(a, c), grammarStep(b, c)];
    assert.equal(a.length > 0, b.length > 0, what);
    if (a.length === 0) return false;
    assert.equal(grammarComplete(a), grammarComplete(b), what);
    assert.equal(grammarForcedText(a, 64).text, grammarForcedText(b, 64).text, what);
  }
  return grammarComplete(a);
}

for (const format of SYNTAXES) {
  test(`A ${format} call among 150 tools with shared name prefixes: the name is one run, each call taken, near-misses refused, as stepped one by one`, () => {
    const spec = { tools: TOOLS, parallel: false, format };
    const indexed = start(toolCallGroup(spec));
    const plain = start(unindexed(toolCallGroup(spec)));
    for (const call of calls(format)) assert.ok(walkAlike(indexed, plain, call, `${format}: ${call}`), `${format} takes ${JSON.stringify(call)}`);
    for (const miss of nearMisses(format)) assert.ok(!walkAlike(indexed, plain, miss, `${format}: ${miss}`), `${format} refuses ${JSON.stringify(miss)}`);
    // Before the name: one run of names, not one configuration per tool.
    const call = calls(format)[2];
    let s = grammarStart({ kind: "tool_calls", tools: TOOLS, parallel: false, format });
    for (const c of call.slice(0, call.indexOf("get_weather_v2"))) s = grammarStep(s, c);
    assert.ok(s.length > 0 && s.length <= 2, `${format}: ${s.length} configurations before the name`);
  });
}

test("Parallel Hermes and Mistral calls among 150 tools: a second call's name is one run too, and both calls are taken as before", () => {
  for (const format of ["hermes", "mistral"] as const) {
    const spec = { tools: TOOLS, parallel: true, format };
    const sep = format === "hermes" ? "\n" : "";
    const two = calls(format)[1] + sep + calls(format)[3];
    assert.ok(walkAlike(start(toolCallGroup(spec)), start(unindexed(toolCallGroup(spec))), two, two));
    let s = grammarStart({ kind: "tool_calls", ...spec });
    const second = calls(format)[1] + sep + calls(format)[3].slice(0, calls(format)[3].indexOf("get_weather_v2_beta"));
    for (const c of second) s = grammarStep(s, c);
    assert.ok(s.length > 0 && s.length <= 2, `${format}: ${s.length} configurations before the second name`);
  }
});
