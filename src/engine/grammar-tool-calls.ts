/**
 * The sequences forced tool calls are written in (grammar.ts `ToolCallFormat`), as groups of pieces
 * the output-grammar automaton walks: each format's tags as literals, each call's arguments as a JSON
 * value following the tool's parameters — or, in GLM's format, as one `<arg_key>`/`<arg_value>` pair
 * per declared property, in declared order, a string-typed value written raw.
 */
import type { Piece, SeqGroup, StringNode } from "./grammar-frames.ts";
import { compilePattern } from "./regex-nfa.ts";
import { ANY_OBJECT, compileSchema, type JsonSchema, resolve, SchemaError, type SchemaNode } from "./json-schema.ts";

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

/** GLM 4.5–4.7's tags (vLLM's `glm45` parser reads the same). */
export const GLM = { open: "<tool_call>", close: "</tool_call>", keyOpen: "<arg_key>", keyClose: "</arg_key>", valueOpen: "<arg_value>", valueClose: "</arg_value>" } as const;

/** A Kimi call's index (`functions.NAME:INDEX`; the model counts calls across the conversation): digits, no sign or leading zero. */
const CALL_INDEX: StringNode = { t: "string", min: 1, max: 9, patterns: [compilePattern("0|[1-9][0-9]*", true)] };
/** Any raw text (a free key or value; its end tag never inside). */
const RAW_TEXT: StringNode = { t: "string", min: 0, max: Infinity, patterns: [] };
const RAW_KEY: StringNode = { ...RAW_TEXT, min: 1 };

/** The top-level group of a `tool_calls` grammar; throws SchemaError for parameters it cannot follow. */
export function toolCallGroup(g: ToolCallsSpec): SeqGroup {
  const args = (t: ToolCallsSpec["tools"][number]) => (t.parameters === undefined ? ANY_OBJECT : compileSchema(t.parameters));
  switch (g.format) {
    case "kimi_k2": {
      const calls: SeqGroup = {
        alts: g.tools.map((t) => [{ lit: `${KIMI.callBegin}functions.${t.name}:` }, { raw: CALL_INDEX, end: KIMI.argsBegin }, { lit: KIMI.argsBegin }, { node: args(t) }, { lit: KIMI.callEnd }]),
        repeat: g.parallel,
        sep: "",
      };
      return { alts: [[{ lit: KIMI.sectionBegin }, { group: calls }, { lit: KIMI.sectionEnd }]], repeat: false, sep: "" };
    }
    case "glm45":
      return { alts: g.tools.map((t) => [{ lit: `${GLM.open}${t.name}\n` }, ...glmArguments(t.parameters), { lit: GLM.close }]), repeat: g.parallel, sep: "\n" };
    default: {
      // Hermes and Llama 3: one JSON object naming the tool, its arguments under "arguments" or "parameters".
      const llama = g.format === "llama3_json";
      const key = llama ? "parameters" : "arguments";
      const options = g.tools.map((t): SchemaNode => ({
        t: "object",
        props: new Map([["name", { t: "literal", texts: [JSON.stringify(t.name)] }], [key, args(t)]]),
        required: new Set(["name", key]),
        extra: null,
      }));
      const call: SchemaNode = options.length === 1 ? options[0] : { t: "anyOf", options };
      const pieces: Piece[] = llama ? [{ node: call }] : [{ lit: "<tool_call>\n" }, { node: call }, { lit: "\n</tool_call>" }];
      return { alts: [pieces], repeat: g.parallel, sep: llama ? "; " : "\n" };
    }
  }
}

/**
 * A GLM call's argument pairs: each declared property in declared order (an optional one may be left
 * out), undeclared ones never; with no declared properties, any number of free pairs.
 */
function glmArguments(parameters: JsonSchema | undefined): Piece[] {
  const node = parameters === undefined ? ANY_OBJECT : resolve(compileSchema(parameters));
  if (node.t === "any") return glmArguments(undefined);
  if (node.t !== "object") throw new SchemaError(`GLM tool-call arguments are key-value pairs, so the parameters must be an object schema, not ${JSON.stringify(node.t)}`);
  if (node.props.size === 0) {
    if (node.extra === null) return [];
    const pair: Piece[] = [{ lit: GLM.keyOpen }, { raw: RAW_KEY, end: GLM.keyClose }, { lit: `${GLM.keyClose}\n${GLM.valueOpen}` }, { raw: RAW_TEXT, end: GLM.valueClose }, { lit: `${GLM.valueClose}\n` }];
    return [{ group: { alts: [[{ group: { alts: [pair], repeat: true, sep: "" } }], []], repeat: false, sep: "" } }];
  }
  const out: Piece[] = [];
  for (const [key, value] of node.props) {
    const pair: Piece[] = [{ lit: `${GLM.keyOpen}${key}${GLM.keyClose}\n${GLM.valueOpen}` }, glmValue(value), { lit: `${GLM.valueClose}\n` }];
    if (node.required.has(key)) out.push(...pair);
    else out.push({ group: { alts: [pair, []], repeat: false, sep: "" } });
  }
  return out;
}

/** A GLM argument value: raw text when the property admits only strings, else JSON. */
function glmValue(node: SchemaNode): Piece {
  const n = resolve(node);
  if (n.t === "string") return { raw: n, end: GLM.valueClose };
  if (glmRawString(n)) return { node: { t: "literal", texts: (n as Extract<SchemaNode, { t: "literal" }>).texts.map((t) => JSON.parse(t) as string) } };
  return { node };
}

/**
 * Whether a GLM argument of schema `node` is written raw (vLLM's `glm45` parser: a property of type
 * string), not as JSON: a string, or an enum or const of strings only.
 */
export function glmRawString(node: SchemaNode): boolean {
  const n = resolve(node);
  return n.t === "string" || (n.t === "literal" && n.texts.every((t) => t.startsWith('"')));
}
