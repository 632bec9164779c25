/**
 * What a request's output must be (grammar.ts compiles it into the output automaton): the kinds of
 * {@link OutputGrammar}, the tool-call formats and their syntaxes, JSON's whitespace rule, and the
 * automaton's limits on nesting and whitespace.
 */
import type { JsonSchema } from "./json-schema.ts";

/** What a request's output must be; plain data, so it travels to cluster workers. */
export type OutputGrammar =
  /** One JSON value following `schema` (`{"type": "object"}` for json_object). */
  | { kind: "json"; schema: JsonSchema; whitespace?: JsonWhitespace }
  /**
   * One or more (`parallel`) calls, each naming one of `tools` with arguments following its parameters
   * (any object when absent), in `format` (default "hermes").
   */
  | {
    kind: "tool_calls"; tools: readonly { name: string; parameters?: JsonSchema }[]; parallel: boolean; whitespace?: JsonWhitespace; format?: ToolCallSyntax;
    /**
     * Free text, in which the format's opening (grammar-tool-calls.ts `toolCallTrigger`) starts calls
     * that must then be whole, then free text again (tool_choice allowed_tools in "auto" mode).
     * Absent: the output is the calls alone.
     */
    amidText?: boolean;
  }
  /** Exactly one of `choices` (vLLM's `choice`), each non-empty. */
  | { kind: "choice"; choices: readonly string[] }
  /**
   * Text that `pattern` matches whole (vLLM's `regex`): ECMAScript syntax, the subset regex-nfa.ts
   * follows; a leading `^` and a trailing `$` may be given or left out.
   */
  | { kind: "regex"; pattern: string }
  /**
   * Text the rule `root` of a context-free grammar matches: GBNF, llama.cpp's notation (vLLM's
   * `structured_outputs.grammar`; gbnf.ts says what of it is read).
   */
  | { kind: "gbnf"; grammar: string }
  /**
   * vLLM's structural tag: free text, except that where one of `triggers` is written, one of the
   * structures whose `begin` starts with it must follow: the rest of its `begin`, a JSON value of its
   * `schema`, its `end`; then free text again (tool calls inside prose, their arguments valid).
   */
  | { kind: "structural_tag"; structures: readonly TagStructure[]; triggers: readonly string[]; whitespace?: JsonWhitespace }
  /**
   * Output that one of `options` (at least one) matches whole: the model picks the branch as it writes
   * (chat's tools beside a response_format: tool calls, or the answer's JSON).
   */
  | { kind: "union"; options: readonly OutputGrammar[] };

/** One structure of a structural tag. */
export interface TagStructure {
  begin: string;
  schema: JsonSchema;
  end: string;
}

/**
 * How a model writes tool calls. "hermes" (Qwen 2.5/3, Hermes): `<tool_call>\n{"name": ..., "arguments":
 * ...}\n</tool_call>` blocks, one per line. "llama3_json" (Llama 3.1–3.3): `{"name": ..., "parameters":
 * ...}` objects separated by `; `. "kimi_k2" (Kimi K2): `<|tool_calls_section_begin|>` then per call
 * `<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{...}<|tool_call_end|>`, then
 * `<|tool_calls_section_end|>`. "glm45" (GLM 4.5–4.7): `<tool_call>NAME\n` then per argument
 * `<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n` (a string value raw, others JSON), then
 * `</tool_call>`, calls separated by a newline. "deepseek_v31" (DeepSeek V3.1): `<｜tool▁calls▁begin｜>` then
 * per call `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`, then `<｜tool▁calls▁end｜>`.
 * "qwen3_coder" (Qwen3-Coder): `<tool_call>\n<function=NAME>\n` then per argument
 * `<parameter=KEY>\nVALUE\n</parameter>\n` (a string value raw, others JSON), then `</function>\n</tool_call>`.
 * "seed_oss" (ByteDance Seed-OSS): as "qwen3_coder" inside `<seed:tool_call>` … `</seed:tool_call>`, a value
 * written between its tags without the newlines (the parser takes either).
 * "gemma4" (Gemma 4): `<|tool_call>call:NAME{key:value,...}<tool_call|>` per call, its strings between
 * `<|"|>` tokens, calls back to back (grammar-gemma4.ts).
 * "deepseek_v3" (DeepSeek V3, R1-0528): as "deepseek_v31", but each call is
 * `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>`, calls a newline apart.
 * "minimax_m2" (MiniMax M2): `<minimax:tool_call>\n` then per call `<invoke name="NAME">\n` and per
 * argument `<parameter name="KEY">VALUE</parameter>\n` (a string value raw, others JSON), then
 * `</invoke>`, calls a newline apart, then `\n</minimax:tool_call>`.
 * "mistral" (Mistral, Mixtral, Magistral, Devstral): `[TOOL_CALLS]` before each call; which way the
 * call follows depends on the tokenizer's version ({@link ToolCallSyntax}).
 * "harmony" (gpt-oss; vLLM's `openai`): a message to the function, after the prompt's
 * `<|start|>assistant`: ` to=functions.NAME<|channel|>commentary json<|message|>{...}`, then `<|call|>`
 * (an end-of-generation token, so one call per answer), optionally after an analysis message
 * `<|channel|>analysis<|message|>...<|end|><|start|>assistant`.
 * "granite" (Granite 3.x): `<|tool_call|>` then one JSON list `[{"name": ..., "arguments": {...}}, ...]`
 * (read after `<tool_call>` too). "phi4_mini_json" (Phi-4-mini): `functools` then such a list.
 * "nemotron_json" (Nemotron Nano 2): such a list between `<TOOLCALL>` and `</TOOLCALL>` (NVIDIA's vLLM plugin's name).
 * vLLM's parser names (but "harmony"); grammar-tool-calls.ts builds each.
 */
export type ToolCallFormat = (typeof TOOL_CALL_FORMATS)[number];
/** Every {@link ToolCallFormat}, for checking a name from the command line. */
export const TOOL_CALL_FORMATS = [
  "hermes", "llama3_json", "kimi_k2", "deepseek_v31", "deepseek_v3", "glm45", "qwen3_coder", "minimax_m2", "mistral", "harmony", "granite", "phi4_mini_json", "lfm2", "nemotron_json", "seed_oss", "gemma4",
] as const;
/** vLLM's names for formats we name otherwise (`--tool-call-parser openai`), accepted too. */
export const TOOL_CALL_FORMAT_ALIASES: Readonly<Record<string, ToolCallFormat>> = { openai: "harmony" };

/**
 * The way a grammar writes forced calls: a {@link ToolCallFormat}, where "mistral" is the shape of
 * tokenizers v11 and later (Mistral Small 3.1+, Magistral, Devstral: `[TOOL_CALLS]NAME[ARGS]{...}`
 * per call, an optional `[CALL_ID]ID` before `[ARGS]`), and "mistral_pre_v11" the older one (Mistral
 * 7B v0.3, Mixtral 8x22B, Mistral Large 2407–2411: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`).
 * The server picks between them by whether the vocabulary has an `[ARGS]` token, as vLLM does
 * (tool-calls-mistral.ts `toolCallSyntax`); the parser reads both.
 */
export type ToolCallSyntax = ToolCallFormat | "mistral_pre_v11";

/** Whether `s` names a {@link ToolCallFormat}. */
export function isToolCallFormat(s: string): s is ToolCallFormat {
  return (TOOL_CALL_FORMATS as readonly string[]).includes(s);
}

/**
 * Where JSON output may hold whitespace. "any" (the default): wherever JSON allows it, up to
 * MAX_WHITESPACE characters in a row. "compact": exactly one space after each `:` and `,` and none
 * elsewhere, as Python's `json.dumps` writes (`{"a": 1, "b": [2, 3]}`; xgrammar's `any_whitespace`
 * off, vLLM's `disable_any_whitespace`). Models trained on such text write it anyway; the grammar then
 * forces the separators, which jump-forward decoding appends without sampling.
 */
export type JsonWhitespace = "any" | "compact";

/** Deepest nesting allowed (a model looping on "[" would otherwise nest until max_tokens). */
export const MAX_DEPTH = 32;
/** Longest whitespace run allowed between tokens of JSON (a model can loop on spaces). */
export const MAX_WHITESPACE = 2;
/** Deepest nesting of grammar rules (gbnf.ts), references that end their sequence not counted. */
export const MAX_RULE_DEPTH = 256;
