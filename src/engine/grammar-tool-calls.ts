/**
 * The sequences forced tool calls are written in (grammar.ts `ToolCallFormat`), as groups of pieces
 * the output-grammar automaton walks: each format's tags as literals, each call's arguments as a JSON
 * value following the tool's parameters (Mistral's older format: one JSON list of calls) — or, in
 * GLM's and Qwen3-Coder's formats, as one key-value pair per declared property, in declared order, a
 * string-typed value written raw; in harmony's (gpt-oss), one message to the function, optionally after
 * an analysis message; in Gemma 4's, its own notation (grammar-gemma4.ts). The calls' alternatives are indexed by the text that names the tool
 * (grammar-pick.ts), so a mask's cost does not grow with the tool count.
 */
import type { Piece, SeqGroup, StringNode } from "./grammar-frames.ts";
import { compilePattern } from "./regex-nfa.ts";
import { indexGroup, objectPick } from "./grammar-pick.ts";
import { GEMMA4_CALL, gemma4Calls } from "./grammar-gemma4.ts";
import { ANY_OBJECT, compileSchema, type JsonSchema, literalNode, resolve, SchemaError, type SchemaNode } from "./json-schema.ts";

/** What grammar.ts needs of a `tool_calls` grammar. */
export interface ToolCallsSpec {
  readonly tools: readonly { name: string; parameters?: JsonSchema }[];
  readonly parallel: boolean;
  readonly format?: string;
}

/** Kimi K2's tags (vLLM's `kimi_k2` parser reads the same). */
export const KIMI = {
  sectionBegin: "<|tool_calls_section_begin|>",
  sectionEnd: "<|tool_calls_section_end|>",
  callBegin: "<|tool_call_begin|>",
  argsBegin: "<|tool_call_argument_begin|>",
  callEnd: "<|tool_call_end|>",
} as const;

/** DeepSeek V3.1's tags (vLLM's `deepseek_v31` parser reads the same). */
export const DEEPSEEK = {
  sectionBegin: "<｜tool▁calls▁begin｜>",
  sectionEnd: "<｜tool▁calls▁end｜>",
  callBegin: "<｜tool▁call▁begin｜>",
  sep: "<｜tool▁sep｜>",
  callEnd: "<｜tool▁call▁end｜>",
} as const;

/** Mistral's tags (control tokens of its tokenizers v3 and later; vLLM's `mistral` parser reads the same). */
export const MISTRAL = { calls: "[TOOL_CALLS]", callId: "[CALL_ID]", args: "[ARGS]" } as const;

/**
 * Harmony's tags (gpt-oss; control tokens of its o200k_harmony vocabulary; vLLM's `openai` tool-call and
 * `openai_gptoss` reasoning parsers read the same). A message is `<|start|>ROLE HEADER<|message|>BODY`
 * then `<|end|>`, or `<|call|>` after a tool call and `<|return|>` after the final answer (both end
 * generation).
 */
export const HARMONY = {
  start: "<|start|>", end: "<|end|>", message: "<|message|>", channel: "<|channel|>", constrain: "<|constrain|>", call: "<|call|>", return: "<|return|>",
} as const;

/** MiniMax M2's section tag and call tags (vLLM's `minimax_m2` parser reads the same). */
export const MINIMAX = { sectionBegin: "<minimax:tool_call>", sectionEnd: "</minimax:tool_call>", invoke: "<invoke name=", invokeEnd: "</invoke>" } as const;

/** GLM 4.5–4.7's tags (vLLM's `glm45` parser reads the same). */
export const GLM = { open: "<tool_call>", close: "</tool_call>", keyOpen: "<arg_key>", keyClose: "</arg_key>", valueOpen: "<arg_value>", valueClose: "</arg_value>" } as const;

/**
 * Formats that write each argument as a key-value pair, a string value raw: where a call's name and
 * each pair's key go, and the tag that ends a raw value (it never holds it).
 */
interface PairFormat {
  readonly callOpen: (name: string) => string;
  readonly callClose: string;
  readonly pairOpen: (key: string) => string;
  readonly valueEnd: string;
  readonly pairClose: string;
  /** A free pair (a tool without declared parameters): the key's opening text and its end tag, then the value's opening text. */
  readonly freeKey: { readonly open: string; readonly end: string; readonly then: string };
}

/** GLM: `<tool_call>NAME\n` then `<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n` per argument, then `</tool_call>`. */
const GLM_PAIRS: PairFormat = {
  callOpen: (name) => `${GLM.open}${name}\n`,
  callClose: GLM.close,
  pairOpen: (key) => `${GLM.keyOpen}${key}${GLM.keyClose}\n${GLM.valueOpen}`,
  valueEnd: GLM.valueClose,
  pairClose: `${GLM.valueClose}\n`,
  freeKey: { open: GLM.keyOpen, end: GLM.keyClose, then: `${GLM.keyClose}\n${GLM.valueOpen}` },
};

/**
 * Qwen3-Coder (vLLM's `qwen3_coder`): `<tool_call>\n<function=NAME>\n` then `<parameter=KEY>\nVALUE\n</parameter>\n`
 * per argument, then `</function>\n</tool_call>`.
 */
export const QWEN3_CODER: PairFormat = {
  callOpen: (name) => `<tool_call>\n<function=${name}>\n`,
  callClose: "</function>\n</tool_call>",
  pairOpen: (key) => `<parameter=${key}>\n`,
  valueEnd: "\n</parameter>",
  pairClose: "\n</parameter>\n",
  freeKey: { open: "<parameter=", end: ">", then: ">\n" },
};

/**
 * Seed-OSS (vLLM's `seed_oss`): Qwen3-Coder's `<function=NAME>` and `<parameter=KEY>` inside
 * `<seed:tool_call>\n` … `\n</seed:tool_call>`, a value between its tags as written.
 */
export const SEED_OSS = { open: "<seed:tool_call>", close: "</seed:tool_call>" } as const;
const SEED_OSS_PAIRS: PairFormat = {
  callOpen: (name) => `${SEED_OSS.open}\n<function=${name}>\n`,
  callClose: `</function>\n${SEED_OSS.close}`,
  pairOpen: (key) => `<parameter=${key}>`,
  valueEnd: "</parameter>",
  pairClose: "</parameter>\n",
  freeKey: { open: "<parameter=", end: ">", then: ">" },
};

/**
 * MiniMax M2 (vLLM's `minimax_m2`): inside `<minimax:tool_call>\n` … `\n</minimax:tool_call>`,
 * `<invoke name="NAME">\n` then `<parameter name="KEY">VALUE</parameter>\n` per argument, then
 * `</invoke>`, calls separated by a newline.
 */
export const MINIMAX_PAIRS: PairFormat = {
  callOpen: (name) => `${MINIMAX.invoke}"${name}">\n`,
  callClose: MINIMAX.invokeEnd,
  pairOpen: (key) => `<parameter name="${key}">`,
  valueEnd: "</parameter>",
  pairClose: "</parameter>\n",
  freeKey: { open: '<parameter name="', end: '"', then: '">' },
};

/** LFM2's tags around a list of Python calls (llama.cpp's LFM2 format reads the same). */
export const LFM2 = { open: "<|tool_call_start|>", close: "<|tool_call_end|>" } as const;

/** The marker Granite's, Phi-4-mini's and Nemotron Nano 2's lists of calls follow (what grammars write). */
export const LIST_MARKERS = { granite: "<|tool_call|>", phi4_mini_json: "functools", nemotron_json: "<TOOLCALL>" } as const;
/** The tag that closes Nemotron Nano 2's list of calls. */
export const NEMOTRON_CLOSE = "</TOOLCALL>";

/** A Kimi call's index (`functions.NAME:INDEX`; the model counts calls across the conversation): digits, no sign or leading zero. */
const CALL_INDEX: StringNode = { t: "string", min: 1, max: 9, patterns: [compilePattern("0|[1-9][0-9]*", true)] };
/** A Mistral call id: nine letters or digits, as mistral-common checks them. */
const MISTRAL_CALL_ID: StringNode = { t: "string", min: 9, max: 9, patterns: [compilePattern("[A-Za-z0-9]{9}", true)] };
/** Any raw text (a free key or value; its end tag never inside). */
const RAW_TEXT: StringNode = { t: "string", min: 0, max: Infinity, patterns: [] };
const RAW_KEY: StringNode = { ...RAW_TEXT, min: 1 };
/** A Python keyword argument's name (an undeclared one). */
const KEYWORD: StringNode = { t: "string", min: 1, max: 64, patterns: [compilePattern("[A-Za-z_][A-Za-z0-9_]*", true)] };

/** The top-level group of a `tool_calls` grammar; throws SchemaError for parameters it cannot follow. */
export function toolCallGroup(g: ToolCallsSpec): SeqGroup {
  const args = (t: ToolCallsSpec["tools"][number]) => (t.parameters === undefined ? ANY_OBJECT : compileSchema(t.parameters));
  switch (g.format) {
    case "kimi_k2":
      return sectioned(KIMI.sectionBegin, KIMI.sectionEnd, g.parallel, g.tools.map((t): Piece[] => [
        { lit: `${KIMI.callBegin}functions.${t.name}:` }, { raw: CALL_INDEX, end: KIMI.argsBegin }, { lit: KIMI.argsBegin }, { node: args(t) }, { lit: KIMI.callEnd },
      ]));
    case "deepseek_v31":
      return sectioned(DEEPSEEK.sectionBegin, DEEPSEEK.sectionEnd, g.parallel, g.tools.map((t) => [{ lit: `${DEEPSEEK.callBegin}${t.name}${DEEPSEEK.sep}` }, { node: args(t) }, { lit: DEEPSEEK.callEnd }]));
    case "deepseek_v3":
      // DeepSeek V3 and R1-0528: the call's type, its name, then its arguments in a json code fence; calls a newline apart.
      return sectioned(DEEPSEEK.sectionBegin, DEEPSEEK.sectionEnd, g.parallel, g.tools.map((t) => [{ lit: `${DEEPSEEK.callBegin}function${DEEPSEEK.sep}${t.name}\n\`\`\`json\n` }, { node: args(t) }, { lit: `\n\`\`\`${DEEPSEEK.callEnd}` }]), "\n");
    case "minimax_m2":
      return sectioned(`${MINIMAX.sectionBegin}\n`, `\n${MINIMAX.sectionEnd}`, false, [[{ group: pairCalls(MINIMAX_PAIRS, g) }]]);
    case "mistral":
      return indexGroup({ alts: g.tools.map((t): Piece[] => [{ lit: `${MISTRAL.calls}${t.name}` }, optional([{ lit: MISTRAL.callId }, { raw: MISTRAL_CALL_ID, end: MISTRAL.args }]), { lit: MISTRAL.args }, { node: args(t) }]), repeat: g.parallel, sep: "" });
    case "mistral_pre_v11":
    case "granite":
    case "phi4_mini_json":
    case "nemotron_json": {
      // One JSON list of calls after the marker; Mistral's SentencePiece tokenizers (v3) write a space before it, Tekken (v7) none.
      const options = g.tools.map((t): SchemaNode => callObject(t.name, "arguments", args(t)));
      const list: SchemaNode = { t: "array", prefix: [], items: anyCall(options), min: 1, max: g.parallel ? Infinity : 1, unique: false };
      const marker: Piece[] = g.format === "mistral_pre_v11" ? [{ lit: MISTRAL.calls }, optional([{ lit: " " }])] : [{ lit: LIST_MARKERS[g.format] }];
      const close: Piece[] = g.format === "nemotron_json" ? [{ lit: NEMOTRON_CLOSE }] : [];
      return { alts: [[...marker, { node: list }, ...close]], repeat: false, sep: "" };
    }
    case "harmony": {
      // The prompt ends with `<|start|>assistant`. gpt-oss reasons first, so an analysis message may
      // come before the call; the call puts its recipient in the role header, as gpt-oss's chat
      // template (and the harmony renderer) write a call back into the next prompt, which then
      // repeats the answer. `<|call|>` is an end-of-generation token: one call, whatever `parallel`.
      const h = HARMONY;
      const analysis = optional([{ lit: `${h.channel}analysis${h.message}` }, { raw: RAW_TEXT, end: h.end }, { lit: `${h.end}${h.start}assistant` }]);
      const call = g.tools.map((t): Piece[] => [{ lit: ` to=functions.${t.name}${h.channel}commentary json${h.message}` }, { node: args(t) }]);
      return { alts: [[analysis, { group: indexGroup({ alts: call, repeat: false, sep: "" }) }]], repeat: false, sep: "" };
    }
    case "lfm2":
      // `[NAME(KEY=VALUE, ...), ...]`: each value JSON, which LFM2's readers (llama.cpp's, ours) take for Python's.
      return sectioned(`${LFM2.open}[`, `]${LFM2.close}`, g.parallel, g.tools.map((t): Piece[] => [{ lit: `${t.name}(` }, ...keywordArguments(t.parameters), { lit: ")" }]), ", ");
    case "glm45":
      return pairCalls(GLM_PAIRS, g);
    case "qwen3_coder":
      return pairCalls(QWEN3_CODER, g);
    case "seed_oss":
      return pairCalls(SEED_OSS_PAIRS, g);
    case "gemma4":
      // Gemma's own notation (bare keys, <|"|>-delimited strings), not JSON: grammar-gemma4.ts.
      return gemma4Calls(g.tools, g.parallel);
    default: {
      // Hermes and Llama 3: one JSON object naming the tool, its arguments under "arguments" or "parameters".
      const llama = g.format === "llama3_json";
      const key = llama ? "parameters" : "arguments";
      const options = g.tools.map((t): SchemaNode => callObject(t.name, key, args(t)));
      const call = anyCall(options);
      const pieces: Piece[] = llama ? [{ node: call }] : [{ lit: "<tool_call>\n" }, { node: call }, { lit: "\n</tool_call>" }];
      return { alts: [pieces], repeat: g.parallel, sep: llama ? "; " : "\n" };
    }
  }
}

/**
 * The text each run of calls in `format` begins with (a call, or a section of calls), so calls can be
 * told from free text around them (`tool_calls` with `amidText`). Throws SchemaError for harmony,
 * whose calls begin in a message's header, after text of the message before.
 */
export function toolCallTrigger(format = "hermes"): string {
  switch (format) {
    case "kimi_k2": return KIMI.sectionBegin;
    case "deepseek_v31":
    case "deepseek_v3": return DEEPSEEK.sectionBegin;
    case "minimax_m2": return MINIMAX.sectionBegin;
    case "mistral":
    case "mistral_pre_v11": return MISTRAL.calls;
    case "granite":
    case "phi4_mini_json":
    case "nemotron_json": return LIST_MARKERS[format];
    case "lfm2": return LFM2.open;
    case "seed_oss": return SEED_OSS.open;
    case "gemma4": return GEMMA4_CALL.open;
    // Llama 3 writes a bare object; its first key is the one text that tells it from prose.
    case "llama3_json": return '{"name"';
    case "harmony": throw new SchemaError("The harmony format's calls begin in a message header, not amid text: tool calls amid free text cannot be constrained in it");
    default: return GLM.open; // hermes, glm45 and qwen3_coder all open a call with <tool_call>
  }
}

/** `{"name": NAME, KEY: ARGUMENTS}`, both required, nothing else. */
function callObject(name: string, key: string, args: SchemaNode): SchemaNode {
  return { t: "object", props: new Map([["name", { t: "literal", texts: [JSON.stringify(name)] }], [key, args]]), required: new Set(["name", key]), extra: null };
}

/** One of the call objects `options`; several picked by their name as one run (grammar-pick.ts). */
function anyCall(options: readonly SchemaNode[]): SchemaNode {
  if (options.length === 1) return options[0];
  const pick = objectPick(options, "name");
  return pick === undefined ? { t: "anyOf", options } : { t: "anyOf", options, pick };
}

/** `pieces`, or nothing. */
function optional(pieces: Piece[]): Piece {
  return { group: { alts: [pieces, []], repeat: false, sep: "" } };
}

/** `begin`, then one call (or more, `sep` apart, with `parallel`) of one of `calls`, then `end`. */
function sectioned(begin: string, end: string, parallel: boolean, calls: Piece[][], sep = ""): SeqGroup {
  return { alts: [[{ lit: begin }, { group: indexGroup({ alts: calls, repeat: parallel, sep }) }, { lit: end }]], repeat: false, sep: "" };
}

/** Calls in a key-value pair format, one alternative per tool, newline-separated. */
function pairCalls(f: PairFormat, g: ToolCallsSpec): SeqGroup {
  return indexGroup({ alts: g.tools.map((t): Piece[] => [{ lit: f.callOpen(t.name) }, ...pairArguments(f, t.parameters), { lit: f.callClose }]), repeat: g.parallel, sep: "\n" });
}

/**
 * A call's argument pairs: each declared property in declared order (an optional one may be left
 * out), undeclared ones never; with no declared properties, any number of free pairs.
 */
function pairArguments(f: PairFormat, parameters: JsonSchema | undefined): Piece[] {
  const node = parameters === undefined ? ANY_OBJECT : resolve(compileSchema(parameters));
  if (node.t === "any") return pairArguments(f, undefined);
  if (node.t !== "object") throw new SchemaError(`This tool-call format writes arguments as key-value pairs, so the parameters must be an object schema, not ${JSON.stringify(node.t)}`);
  if (node.props.size === 0) {
    if (node.extra === null) return [];
    const k = f.freeKey;
    const pair: Piece[] = [{ lit: k.open }, { raw: RAW_KEY, end: k.end }, { lit: k.then }, { raw: RAW_TEXT, end: f.valueEnd }, { lit: f.pairClose }];
    return [optional([{ group: { alts: [pair], repeat: true, sep: "" } }])];
  }
  const out: Piece[] = [];
  for (const [key, value] of node.props) {
    const pair: Piece[] = [{ lit: f.pairOpen(key) }, pairValue(value, f.valueEnd), { lit: f.pairClose }];
    if (node.required.has(key)) out.push(...pair);
    else out.push(optional(pair));
  }
  return out;
}

/**
 * A Python call's keyword arguments: each declared property in declared order (an optional one may be
 * left out), `, ` between those written; with no declared properties, any number of free ones.
 */
function keywordArguments(parameters: JsonSchema | undefined): Piece[] {
  const node = parameters === undefined ? ANY_OBJECT : resolve(compileSchema(parameters));
  if (node.t === "any") return keywordArguments(undefined);
  if (node.t !== "object") throw new SchemaError(`The lfm2 tool-call format writes arguments as keywords, so the parameters must be an object schema, not ${JSON.stringify(node.t)}`);
  if (node.props.size === 0) {
    if (node.extra === null) return [];
    return [optional([{ group: { alts: [[{ raw: KEYWORD, end: "=" }, { lit: "=" }, { node: node.extra }]], repeat: true, sep: ", " } }])];
  }
  const pairs = [...node.props].map(([key, value]) => ({ required: node.required.has(key), pieces: (sep: string): Piece[] => [{ lit: `${sep}${key}=` }, { node: value }] }));
  const after = (i: number): Piece[] => pairs.slice(i).flatMap((p) => (p.required ? p.pieces(", ") : [optional(p.pieces(", "))]));
  // The first pair written has no separator: an optional one may give way to the next.
  const from = (i: number): Piece[] => {
    if (i === pairs.length) return [];
    const first = [...pairs[i].pieces(""), ...after(i + 1)];
    return pairs[i].required ? first : [{ group: { alts: [first, from(i + 1)], repeat: false, sep: "" } }];
  };
  return from(0);
}

/** A pair's value: raw text (ended by `end`) when the property admits only strings, else JSON. */
function pairValue(node: SchemaNode, end: string): Piece {
  const n = resolve(node);
  if (n.t === "string") return { raw: n, end };
  if (n.t === "literal" && rawStringArgument(n)) return { node: literalNode(n.texts.map((t) => JSON.parse(t) as string)) };
  return { node };
}

/**
 * Whether an argument of schema `node` is written raw in a key-value pair format (vLLM's `glm45` and
 * `qwen3_coder` parsers: a property of type string), not as JSON: a string, or an enum or const of
 * strings only.
 */
export function rawStringArgument(node: SchemaNode): boolean {
  const n = resolve(node);
  return n.t === "string" || (n.t === "literal" && n.texts.every((t) => t.startsWith('"')));
}
