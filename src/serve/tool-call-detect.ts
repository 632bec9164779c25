/**
 * `--tool-call-parser auto`: the format a model writes tool calls in, told from its chat template (the
 * text its template writes earlier calls back in, or the markers it gives the model) and, for gpt-oss,
 * its architecture — as llama.cpp's server picks a chat format from the template. Where nothing tells,
 * Hermes (`<tool_call>` blocks), the default.
 */
import type { Architecture } from "../model/config.ts";
import { type ToolCallFormat, TOOL_CALL_FORMAT_ALIASES, TOOL_CALL_FORMATS } from "../engine/grammar-types.ts";

/** A `--tool-call-parser` choice: a format, or "auto" (told from the model). */
export type ToolCallChoice = ToolCallFormat | "auto";

/** The choice `s` names (a format, vLLM's alias of one, or "auto"), or undefined. */
export function toolCallChoice(s: string): ToolCallChoice | undefined {
  if (s === "auto") return "auto";
  const name = TOOL_CALL_FORMAT_ALIASES[s] ?? s;
  return (TOOL_CALL_FORMATS as readonly string[]).includes(name) ? name as ToolCallFormat : undefined;
}

/** Markers in a template, most specific first, and the format each tells. */
const MARKERS: readonly [test: (t: string) => boolean, format: ToolCallFormat][] = [
  [(t) => t.includes("<|channel|>") && t.includes("<|start|>"), "harmony"],
  [(t) => t.includes("<minimax:tool_call>"), "minimax_m2"],
  // Gemma 4 writes <|tool_call>call:NAME{...}<tool_call|>.
  [(t) => t.includes("<|tool_call>"), "gemma4"],
  [(t) => t.includes("<|tool_calls_section_begin|>") || t.includes("<|tool_call_begin|>"), "kimi_k2"],
  // DeepSeek V3 and R1-0528 write a call's arguments in a json code fence; V3.1 bare.
  [(t) => t.includes("<｜tool▁calls▁begin｜>") && t.includes("```json"), "deepseek_v3"],
  [(t) => t.includes("<｜tool▁calls▁begin｜>"), "deepseek_v31"],
  [(t) => t.includes("[TOOL_CALLS]"), "mistral"],
  [(t) => t.includes("<|tool_call|>"), "granite"],
  // Nemotron Nano 2 hands the tools over in <AVAILABLE_TOOLS>…</AVAILABLE_TOOLS> and answers with <TOOLCALL>[…]</TOOLCALL>.
  [(t) => t.includes("<TOOLCALL>") || t.includes("<AVAILABLE_TOOLS>"), "nemotron_json"],
  // LFM2 hands the tools over in <|tool_list_start|>…<|tool_list_end|>, LFM2.5 after "List of tools: [" (llama.cpp tells them so).
  [(t) => t.includes("<|tool_list_start|>") || t.includes("<|tool_call_start|>") || t.includes("List of tools: ["), "lfm2"],
  // Phi-4-mini's template hands the tools over in <|tool|>…<|/tool|>; it answers with functools[…].
  [(t) => t.includes("functools") || (t.includes("<|tool|>") && t.includes("<|/tool|>")), "phi4_mini_json"],
  // Seed-OSS writes Qwen3-Coder's calls inside its own tags.
  [(t) => t.includes("<seed:tool_call>"), "seed_oss"],
  [(t) => t.includes("<function=") && t.includes("<parameter="), "qwen3_coder"],
  [(t) => t.includes("<arg_key>"), "glm45"],
  [(t) => t.includes("<|python_tag|>") || (t.includes("<|start_header_id|>") && t.includes('"parameters"')), "llama3_json"],
];

/** The tool-call format `template` (and `architecture`) tell; "hermes" where nothing does. */
export function detectToolCallFormat(template: string | undefined, architecture: Architecture): ToolCallFormat {
  if (architecture === "gpt-oss") return "harmony";
  if (template === undefined) return "hermes";
  return MARKERS.find(([test]) => test(template))?.[1] ?? "hermes";
}
