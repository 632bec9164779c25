/**
 * Tool calls in the formats that write each argument as a key-value pair, typed by the tool's schema:
 * GLM 4.5–4.7's (vLLM's `glm45`): `<tool_call>NAME` then `<arg_key>KEY</arg_key>` and
 * `<arg_value>VALUE</arg_value>` per argument, then `</tool_call>`; Qwen3-Coder's (vLLM's
 * `qwen3_coder`): `<tool_call>` then `<function=NAME>`, `<parameter=KEY>` VALUE `</parameter>` per
 * argument, `</function>`, `</tool_call>`; MiniMax M2's (vLLM's `minimax_m2`): inside `<minimax:tool_call>` …
 * `</minimax:tool_call>`, `<invoke name="NAME">` then `<parameter name="KEY">VALUE</parameter>` per
 * argument, then `</invoke>`; Seed-OSS's (vLLM's `seed_oss`): Qwen3-Coder's inside `<seed:tool_call>` …
 * `</seed:tool_call>`. A value is raw text where the schema makes the argument a
 * string (grammar-tool-calls.ts `rawStringArgument`), else JSON — read as text when it does not
 * parse, as vLLM does. Unlike vLLM's GLM parser, a GLM raw string keeps its leading and trailing
 * whitespace (a file's trailing newline is the file's); Qwen3-Coder's template puts a newline on
 * each side of a value, and exactly those two are taken off. A MiniMax raw string is kept whole, as
 * GLM's (vLLM strips its whitespace).
 */
import { GLM, MINIMAX, rawStringArgument, SEED_OSS } from "../engine/grammar-tool-calls.ts";
import { compileSchema, type JsonSchema, resolve, type SchemaNode } from "../engine/json-schema.ts";
import { type CallSyntax, FUNCTION_NAME, type ParsedToolCall } from "./tool-calls.ts";
import { compactJson } from "./tool-calls-json.ts";

/** A tool as the parser sees it: its name and its parameters' schema. */
export interface ToolSpec {
  readonly name: string;
  readonly parameters?: JsonSchema;
}

/** Each tool's declared properties, by tool name. */
type ToolProps = ReadonlyMap<string, ReadonlyMap<string, SchemaNode>>;

const GLM_PAIR = /^\s*<arg_key>([\s\S]*?)<\/arg_key>\s*<arg_value>([\s\S]*?)<\/arg_value>/;
const QWEN_FUNCTION = /^\s*<function=([^>\n]+)>\n?([\s\S]*?)<\/function>\s*$/;
const QWEN_PARAMETER = /^\s*<parameter=([^>\n]+)>\n?([\s\S]*?)\n?<\/parameter>/;
/** After `<invoke name=`: the quoted name; then a parameter, its name quoted either way. */
const MINIMAX_NAME = /^\s*(?:"([^"\n]+)"|'([^'\n]+)')\s*>/;
const MINIMAX_PARAMETER = /^\s*<parameter name=(?:"([^"\n]+)"|'([^'\n]+)')>([\s\S]*?)<\/parameter>/;

/**
 * Whether a body ends inside a value (its last `open` after its last `close`): a raw string value
 * may hold the call's closing tag (a file about tool calls; forced calls' grammars allow it), which
 * is then the value's text.
 */
const inValue = (open: string, close: string) => (body: string) => body.lastIndexOf(open) > body.lastIndexOf(close);

/** The GLM syntax for `ToolCallStream`, reading argument types from `tools`. */
export function glmSyntax(tools: readonly ToolSpec[]): CallSyntax {
  const props = toolProps(tools);
  return { open: GLM.open, close: GLM.close, parse: (body) => parseGlmBody(body, props), unclosed: inValue(GLM.valueOpen, GLM.valueClose) };
}

/** The Qwen3-Coder syntax for `ToolCallStream`, reading argument types from `tools`. */
export function qwen3CoderSyntax(tools: readonly ToolSpec[]): CallSyntax {
  const props = toolProps(tools);
  return { open: "<tool_call>", close: "</tool_call>", parse: (body) => parseQwen3CoderBody(body, props), unclosed: inValue("<parameter=", "</parameter>") };
}

/** The Seed-OSS syntax for `ToolCallStream`: Qwen3-Coder's calls inside `<seed:tool_call>` … `</seed:tool_call>`. */
export function seedOssSyntax(tools: readonly ToolSpec[]): CallSyntax {
  const props = toolProps(tools);
  return { open: SEED_OSS.open, close: SEED_OSS.close, parse: (body) => parseQwen3CoderBody(body, props), unclosed: inValue("<parameter=", "</parameter>") };
}

/** The MiniMax M2 syntax for `ToolCallStream` (each `<invoke>` a call, the section tags dropped), reading argument types from `tools`. */
export function minimaxSyntax(tools: readonly ToolSpec[]): CallSyntax {
  const props = toolProps(tools);
  return {
    open: MINIMAX.invoke, close: MINIMAX.invokeEnd, drop: [MINIMAX.sectionBegin, MINIMAX.sectionEnd], parse: (body) => parseMinimaxBody(body, props),
    unclosed: inValue("<parameter name=", "</parameter>"),
  };
}

/** The call in one `<invoke name=` block's body (`"NAME">` then parameters), or null when it is not one. */
export function parseMinimaxBody(body: string, props: ToolProps): ParsedToolCall | null {
  const m = MINIMAX_NAME.exec(body);
  if (m === null) return null;
  const name = (m[1] ?? m[2]).trim();
  if (!FUNCTION_NAME.test(name)) return null;
  return readPairs(name, body.slice(m[0].length), (s) => {
    const p = MINIMAX_PARAMETER.exec(s);
    return p === null ? null : { length: p[0].length, key: p[1] ?? p[2], value: p[3] };
  }, props);
}

/** The call in one GLM block's body, or null when it is not one (no name, or text between the pairs). */
export function parseGlmBody(body: string, props: ToolProps): ParsedToolCall | null {
  const at = body.indexOf(GLM.keyOpen);
  const name = (at < 0 ? body : body.slice(0, at)).trim();
  return FUNCTION_NAME.test(name) ? readPairs(name, at < 0 ? "" : body.slice(at), regexPair(GLM_PAIR), props) : null;
}

/** The call in one Qwen3-Coder block's body, or null when it is not one. */
export function parseQwen3CoderBody(body: string, props: ToolProps): ParsedToolCall | null {
  const m = QWEN_FUNCTION.exec(body);
  if (m === null) return null;
  const name = m[1].trim();
  return FUNCTION_NAME.test(name) ? readPairs(name, m[2], regexPair(QWEN_PARAMETER), props) : null;
}

/** The pair at the start of a text (how many characters it takes), or null when none is there. */
type PairReader = (rest: string) => { length: number; key: string; value: string } | null;

/** A reader of the pair `re` matches at the start, its key in group 1 and its value in group 2. */
function regexPair(re: RegExp): PairReader {
  return (rest) => {
    const m = re.exec(rest);
    return m === null ? null : { length: m[0].length, key: m[1], value: m[2] };
  };
}

/** The call `name` with the pairs `pair` reads from `rest` (nothing but whitespace between them), or null. */
function readPairs(name: string, rest: string, pair: PairReader, props: ToolProps): ParsedToolCall | null {
  const types = props.get(name);
  // Each key's value as JSON text; a key written twice keeps its first place and its last value, as in an object.
  const args = new Map<string, string>();
  while (rest.trim() !== "") {
    const m = pair(rest);
    if (m === null) return null;
    const key = m.key.trim();
    const type = types?.get(key);
    args.set(key, type !== undefined && rawStringArgument(type) ? JSON.stringify(m.value) : jsonOrText(m.value));
    rest = rest.slice(m.length);
  }
  return { name, arguments: `{${[...args].map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")}}` };
}

/** A value as JSON text: as written where it is JSON (compactJson: numbers not rounded), else a string of it. */
function jsonOrText(v: string): string {
  try {
    JSON.parse(v);
  } catch {
    return JSON.stringify(v);
  }
  return compactJson(v.trim());
}

function toolProps(tools: readonly ToolSpec[]): ToolProps {
  return new Map(tools.map((t) => [t.name, propertiesOf(t.parameters)]));
}

/** The declared properties of a tool's parameters (none where the schema cannot be compiled). */
function propertiesOf(parameters: JsonSchema | undefined): ReadonlyMap<string, SchemaNode> {
  if (parameters === undefined) return new Map();
  try {
    const n = resolve(compileSchema(parameters));
    return n.t === "object" ? n.props : new Map();
  } catch {
    return new Map();
  }
}
