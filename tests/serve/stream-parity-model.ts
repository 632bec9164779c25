/**
 * The scripted model of the stream-parity tests (stream-parity*-hunt5.test.ts) and the servers they
 * run. Its greedy answer to a chat whose last message ends in
 * - ".": "Hello there, friend." in three tokens;
 * - "!": two Hermes calls, the first split over three tokens (get_weather, then get_time);
 * - "?": one Hermes call written as one token;
 * - "#": two Llama 3 JSON calls; "@": one Mistral call ([TOOL_CALLS]NAME[ARGS]{…});
 * - "%": "Café 😀" with "é" and "😀" split into their bytes, one token each;
 * - "&": text, a Hermes call whose tags are split across tokens, text; "$": text, then the Mistral
 *   call; "=": `<|python_tag|>` then the Llama 3 calls;
 * - "*": reasoning whose tags are split across tokens, then text; "~": reasoning, then one Hermes call;
 * - "1"…"6": calls in the Kimi K2, DeepSeek V3.1, DeepSeek V3, GLM 4.5, Qwen3-Coder and MiniMax M2
 *   formats (FORMATS), cut into pieces of a few characters (tags split across them).
 * Reasoning comes from tests/serve/reasoning-model.ts.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import type OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { type ServerOptions, startServer } from "../../src/serve/server.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";
import * as reasoner from "./reasoning-model.ts";

const CALL = '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n';
const SECOND = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>';
const ONE = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';
const LLAMA = ['{"name": "get_weather", ', '"parameters": {"city": "Paris"}}', "; ", '{"name": "get_time", "parameters": {"zone": "CET"}}'];
const MISTRAL = ["[TOOL_CALLS]", 'get_weather[ARGS]{"city": ', '"Rome"}'];
const TEXT = ["Hello", " there", ", friend."];
const BYTES = ["Caf", "<0xC3>", "<0xA9>", " ", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"];
// Tags split across tokens, text before and after calls, reasoning before a call.
const TEXT_CALL = ["Let me check.", " <tool", '_call>\n{"name": "get_time", "arguments": {"zone": "Z\u00fcrich"}}\n</tool', "_call>", " Done."];
const SPLIT_THINK = ["<th", "ink> Plan", "ning.</thi", "nk>Answer", " here."];
const THINK_CALL = ["<think>", " Let me call.", "</think>", "\n\n"];
/** Each other tool-call format's answer (text, calls, text between), the character that picks it, and its delta size. */
const KIMI = '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>';
const DS = '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>';
const FORMAT_ANSWERS: Record<FormatSetup, [string, string, number]> = {
  kimi_k2: ["1", `Checking.<|tool_calls_section_begin|>${KIMI}\n${KIMI.replace(":0", ":1").replace("Paris", "Lyon")}<|tool_calls_section_end|>`, 5],
  deepseek_v31: ["2", `Sure.<｜tool▁calls▁begin｜>${DS}${DS.replace("Paris", "Lyon")}<｜tool▁calls▁end｜>`, 6],
  deepseek_v3: ["3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", 7],
  glm45: ["4", "Let me look.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value> Paris\n</arg_value>\n</tool_call><tool_call>get_time\n</tool_call>", 8],
  qwen3_coder: ["5", "<tool_call>\n<function=get_weather>\n<parameter=city>\n Paris\n\n</parameter>\n</function>\n</tool_call> After.", 9],
  minimax_m2: ["6", '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city"> Paris\n</parameter>\n</invoke>\n<invoke name="get_time">\n</invoke>\n</minimax:tool_call>', 4],
};
/** The tool-call formats beside hermes, llama3_json and mistral. */
export type FormatSetup = "kimi_k2" | "deepseek_v31" | "deepseek_v3" | "glm45" | "qwen3_coder" | "minimax_m2";
/** Each such format, with the last character that asks for its answer. */
export const FORMATS = Object.entries(FORMAT_ANSWERS).map(([f, [last]]) => [f as FormatSetup, last] as const);
/** `text` in pieces of `size` characters, each made longer until it is a token no other piece is. */
function cut(text: string, size: number, seen: Set<string>): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i = out.join("").length) {
    let n = size;
    while (seen.has(text.slice(i, i + n)) && i + n < text.length) n++;
    let piece = text.slice(i, i + n);
    // The text's tail is a piece already: it goes onto the one before.
    if (seen.has(piece) && out.length > 0) piece = out.pop()! + piece;
    if (seen.has(piece)) throw new RangeError(`The piece ${JSON.stringify(piece)} is used twice`);
    seen.add(piece);
    out.push(piece);
  }
  return out;
}

const OTHER_PIECES = ["<tool_call>", CALL, "</tool_call>", SECOND, ONE, ...LLAMA, ...MISTRAL, ...TEXT, "Caf", ...TEXT_CALL, ...SPLIT_THINK, ...THINK_CALL, "Sure. ", "<|python_tag|>"];
const seen = new Set(OTHER_PIECES);
const FORMAT_PIECES = Object.values(FORMAT_ANSWERS).map(([last, text, size]) => [last, ...cut(text, size, seen)]);
const TEMPLATE = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}" +
  "{% if add_generation_prompt %}assistant{{ messages[-1].content[-1:] }}{% endif %}";
const chain = (...p: string[]): [string, string][] => [...p.slice(1).map((to, i): [string, string] => [p[i], to]), [p[p.length - 1], "<eos>"]];

const dir = mkdtempSync(`${tmpdir()}/stream-parity-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const path = `${dir}/parity.gguf`;
await writeScriptedModel(path, {
  pieces: [...OTHER_PIECES, ...FORMAT_PIECES.flatMap((p) => p.slice(1))],
  next: [...chain(".", ...TEXT), ...chain("!", "<tool_call>", CALL, "</tool_call>", SECOND), ...chain("?", ONE), ...chain("#", ...LLAMA), ...chain("@", ...MISTRAL), ...chain("%", ...BYTES),
    ...chain("&", ...TEXT_CALL), ...chain("*", ...SPLIT_THINK), ...chain("~", ...THINK_CALL).slice(0, -1), ["\n\n", ONE],
    ["$", "Sure. "], ["Sure. ", MISTRAL[0]], ["=", "<|python_tag|>"], ["<|python_tag|>", LLAMA[0]], ...FORMAT_PIECES.flatMap((p) => chain(...p))],
  chatTemplate: TEMPLATE,
  contextLength: 2048,
});
const model = await loadModel(path);

/** Which model and parsers a server runs. */
export type Setup = "hermes" | "llama3_json" | "mistral" | "reasoning" | "think" | FormatSetup;

/** The tools the model calls (a request's `tools`). */
export const TOOLS: OpenAI.ChatCompletionFunctionTool[] = ["get_weather", "get_time"].map((name) => ({
  type: "function" as const,
  function: { name, parameters: { type: "object", properties: { city: { type: "string" }, zone: { type: "string" } } } },
}));

/** Starts a server for `setup`, runs `fn` with its URL and model name, and shuts it down. */
export async function withServer(setup: Setup, fn: (url: string, model: string) => Promise<void>): Promise<void> {
  const base: ServerOptions = { host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256, modelPath: path, model };
  const opts: ServerOptions = setup === "reasoning"
    ? { ...base, modelPath: reasoner.modelPath, model: reasoner.model, reasoningParser: "think" }
    : setup === "think" ? { ...base, reasoningParser: "think" } : { ...base, toolCallParser: setup };
  const s = await startServer(opts);
  try {
    const models = await (await fetch(`${s.url}/v1/models`)).json() as { data: { id: string }[] };
    await fn(s.url, models.data[0].id);
  } finally {
    await s.shutdown();
  }
}

/** A value with every id replaced by its shape (prefix and length) and timestamps dropped, for comparing. */
export function scrub(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(scrub);
  if (v === null || typeof v !== "object") return v;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) {
    if (k === "created" || k === "created_at" || k === "completed_at") continue;
    out[k] = (k === "id" || k === "call_id" || k === "item_id") && typeof x === "string" ? `${/^[a-z]+_/.exec(x)?.[0] ?? ""}<${x.length}>` : scrub(x);
  }
  return out;
}
