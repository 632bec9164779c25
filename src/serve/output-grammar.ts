/**
 * The output grammar a chat request asks for, from `response_format` (json_object, json_schema) and
 * `tool_choice` ("required", or naming a function: the answer is then tool calls whose arguments
 * follow the function's parameters). Schemas are checked here, so a schema outside the subset the
 * decoder follows (src/engine/json-schema.ts) is a 400 that names the keyword, before any work.
 */
import type { OutputGrammar } from "../engine/grammar.ts";
import { compileSchema, SchemaError } from "../engine/json-schema.ts";
import { ApiError, describe } from "./errors.ts";
import type { ChatRequest } from "./schemas.ts";

/** What a chat request's answer must be (undefined: free text), and whether it may hold several tool calls. */
export interface ChatGrammar {
  grammar: OutputGrammar | undefined;
  parallelToolCalls: boolean;
}

/** Reads `tool_choice` and `response_format`; a forced tool call wins over a response format (its answer has no content). */
export function chatGrammar(body: ChatRequest): ChatGrammar {
  const tools = body.tools ?? [];
  const choice = body.tool_choice ?? "auto";
  if (choice === "required" || typeof choice !== "string") {
    if (tools.length === 0) throw new ApiError(400, `Forcing a tool call with tool_choice ${describe(choice)} needs at least one function in tools`, "tool_choice", "invalid_value");
    const named = typeof choice === "string" ? tools : tools.filter((t) => t.function.name === choice.function.name);
    if (named.length === 0) {
      throw new ApiError(400, `The function ${JSON.stringify((choice as { function: { name: string } }).function.name)} named by tool_choice is not among the request's tools`, "tool_choice", "invalid_value");
    }
    const forced = named.map((t) => ({ name: t.function.name, ...(t.function.parameters === undefined ? {} : { parameters: t.function.parameters }) }));
    for (const t of forced) checkSchema(t.parameters ?? true, "tools", `The parameters of function ${JSON.stringify(t.name)}`);
    // A named function is called once, as OpenAI does; "required" may call several unless told not to.
    const parallel = typeof choice === "string" && (body.parallel_tool_calls ?? true);
    return { grammar: { kind: "tool_calls", tools: forced, parallel }, parallelToolCalls: parallel };
  }
  const parallelToolCalls = body.parallel_tool_calls ?? true;
  const format = body.response_format;
  if (!format || format.type === "text") return { grammar: undefined, parallelToolCalls };
  if (format.type === "json_object") return { grammar: { kind: "json", schema: { type: "object" } }, parallelToolCalls };
  if (format.type === "json_schema") {
    const spec = (format as { json_schema?: unknown }).json_schema;
    if (typeof spec !== "object" || spec === null || Array.isArray(spec)) {
      throw new ApiError(400, `A response_format of type json_schema needs a "json_schema" object with the schema, got ${describe(spec)}`, "response_format", "invalid_value");
    }
    const schema = (spec as { schema?: unknown }).schema ?? true;
    checkSchema(schema, "response_format", "The response_format schema");
    return { grammar: { kind: "json", schema: schema as boolean | Record<string, unknown> }, parallelToolCalls };
  }
  throw new ApiError(400, `The response_format type must be "text", "json_object" or "json_schema", got ${describe(format.type)}`, "response_format", "invalid_value");
}

function checkSchema(schema: unknown, param: string, what: string): void {
  try {
    compileSchema(schema);
  } catch (e) {
    if (e instanceof SchemaError) throw new ApiError(400, `${what} cannot be followed: ${lowerFirst(e.message)}`, param, "invalid_value");
    throw e;
  }
}

function lowerFirst(s: string): string {
  return s.charAt(0).toLowerCase() + s.slice(1);
}
