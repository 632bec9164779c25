/**
 * Tool calls in the formats that wrap call blocks in a section. Kimi K2's (vLLM's `kimi_k2` parser):
 * inside `<|tool_calls_section_begin|>` … `<|tool_calls_section_end|>`, one
 * `<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{…}<|tool_call_end|>` block per call. The call's id is the model's own `functions.NAME:INDEX`: Kimi's chat template
 * writes a call back by its id, so returning that id lets the next turn's prompt repeat the answer's
 * text exactly — and reuse its KV cache — where a server-made `call_…` id would change it.
 * DeepSeek V3.1's format (vLLM's `deepseek_v31`) has the same shape: `<｜tool▁calls▁begin｜>` …
 * `<｜tool▁calls▁end｜>` around `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>` blocks;
 * DeepSeek V3's and R1-0528's (vLLM's `deepseek_v3`) blocks say the call's type and fence the arguments:
 * `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>`.
 */
import { DEEPSEEK, KIMI } from "../engine/grammar-tool-calls.ts";
import { type CallSyntax, FUNCTION_NAME, type ParsedToolCall } from "./tool-calls.ts";
import { jsonObject } from "./tool-calls-json.ts";

/** `functions.NAME:INDEX` or `NAME:INDEX` (the name may hold dots; the last dotted part is the function's). */
const CALL_ID = /^(?:[^<>\s]*\.)?([^<>\s.:]+):(\d+)$/;

/** The call in one block's body (`ID<|tool_call_argument_begin|>ARGS`), or null when it is not one. */
export function parseKimiBody(body: string): ParsedToolCall | null {
  const at = body.indexOf(KIMI.argsBegin);
  if (at < 0) return null;
  const id = body.slice(0, at).trim();
  const m = CALL_ID.exec(id);
  if (m === null) return null;
  const args = body.slice(at + KIMI.argsBegin.length).trim();
  return jsonObject(args) !== null ? { id, name: m[1], arguments: args } : null;
}

/** Kimi K2's syntax for `ToolCallStream`: call blocks, the section tags (and their singular variants, which some checkpoints write) dropped. */
export const KIMI_SYNTAX: CallSyntax = {
  open: KIMI.callBegin,
  close: KIMI.callEnd,
  drop: [KIMI.sectionBegin, KIMI.sectionEnd, "<|tool_call_section_begin|>", "<|tool_call_section_end|>"],
  parse: parseKimiBody,
};

/** The call in one DeepSeek V3.1 block's body (`NAME<｜tool▁sep｜>ARGS`), or null when it is not one. */
export function parseDeepSeekBody(body: string): ParsedToolCall | null {
  const at = body.indexOf(DEEPSEEK.sep);
  if (at < 0) return null;
  const name = body.slice(0, at).trim();
  const args = body.slice(at + DEEPSEEK.sep.length).trim();
  return FUNCTION_NAME.test(name) && jsonObject(args) !== null ? { name, arguments: args } : null;
}

/** A DeepSeek V3 block's body: `function<｜tool▁sep｜>NAME`, a json code fence around the arguments. */
const DEEPSEEK_V3_BODY = /^\s*function<｜tool▁sep｜>([^\n]+)\n```(?:json)?\n([\s\S]*)\n```\s*$/;

/** The call in one DeepSeek V3 block's body, or null when it is not one. */
export function parseDeepSeekV3Body(body: string): ParsedToolCall | null {
  const m = DEEPSEEK_V3_BODY.exec(body);
  if (m === null) return null;
  const name = m[1].trim();
  const args = m[2].trim();
  return FUNCTION_NAME.test(name) && jsonObject(args) !== null ? { name, arguments: args } : null;
}

/** DeepSeek V3.1's syntax for `ToolCallStream`: call blocks, the section tags dropped. */
export const DEEPSEEK_SYNTAX: CallSyntax = { open: DEEPSEEK.callBegin, close: DEEPSEEK.callEnd, drop: [DEEPSEEK.sectionBegin, DEEPSEEK.sectionEnd], parse: parseDeepSeekBody };

/** DeepSeek V3's syntax for `ToolCallStream`: V3.1's tags, fenced bodies. */
export const DEEPSEEK_V3_SYNTAX: CallSyntax = { ...DEEPSEEK_SYNTAX, parse: parseDeepSeekV3Body };
