/**
 * Tool calls in GLM 4.5–4.7's format (vLLM's `glm45` parser): `<tool_call>NAME` then, per argument,
 * `<arg_key>KEY</arg_key>` and `<arg_value>VALUE</arg_value>`, then `</tool_call>`. A value is raw text
 * where the tool's schema makes the argument a string (grammar-tool-calls.ts `glmRawString`), else
 * JSON — read as text when it does not parse, as vLLM does. Unlike vLLM, a raw string keeps its
 * leading and trailing whitespace: a file's contents end in a newline that matters.
 */
import { GLM, glmRawString } from "../engine/grammar-tool-calls.ts";
import { compileSchema, type JsonSchema, resolve, type SchemaNode } from "../engine/json-schema.ts";
import type { CallSyntax, ParsedToolCall } from "./tool-calls.ts";

/** A tool as the parser sees it: its name and its parameters' schema. */
export interface ToolSpec {
  readonly name: string;
  readonly parameters?: JsonSchema;
}

/** What a function's name may hold (OpenAI's letters, digits, `_` and `-`, plus dots and other scripts' letters). */
const FUNCTION_NAME = /^[\p{L}\p{N}_.-]+$/u;
const PAIR = /^\s*<arg_key>([\s\S]*?)<\/arg_key>\s*<arg_value>([\s\S]*?)<\/arg_value>/;

/** The GLM syntax for `ToolCallStream`, reading argument types from `tools`. */
export function glmSyntax(tools: readonly ToolSpec[]): CallSyntax {
  const props = new Map(tools.map((t) => [t.name, propertiesOf(t.parameters)]));
  return { open: GLM.open, close: GLM.close, parse: (body) => parseGlmBody(body, props) };
}

/** The call in one block's body, or null when it is not one (no name, or text between the pairs). */
export function parseGlmBody(body: string, props: ReadonlyMap<string, ReadonlyMap<string, SchemaNode>>): ParsedToolCall | null {
  const at = body.indexOf(GLM.keyOpen);
  const name = (at < 0 ? body : body.slice(0, at)).trim();
  if (!FUNCTION_NAME.test(name)) return null;
  const types = props.get(name);
  const args: Record<string, unknown> = {};
  let rest = at < 0 ? "" : body.slice(at);
  while (rest.trim() !== "") {
    const m = PAIR.exec(rest);
    if (m === null) return null;
    const key = m[1].trim();
    const type = types?.get(key);
    args[key] = type !== undefined && glmRawString(type) ? m[2] : jsonOrText(m[2]);
    rest = rest.slice(m[0].length);
  }
  return { name, arguments: JSON.stringify(args) };
}

function jsonOrText(v: string): unknown {
  try {
    return JSON.parse(v);
  } catch {
    return v;
  }
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
