/**
 * The output grammar a request asks for: `response_format` (json_object, json_schema; chat and
 * completions), chat's `tool_choice` ("required", or naming a function: the answer is then tool calls
 * whose arguments follow the function's parameters), and vLLM's `structured_outputs` (`json`, `regex`,
 * `choice`, `grammar` (GBNF), `structural_tag`, `json_object`, `disable_any_whitespace`) with its older top-level names
 * (`guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`). Schemas and expressions are checked here, so what the decoder
 * cannot follow (src/engine/json-schema.ts, src/engine/regex-nfa.ts) is a 400 that names it, before
 * any work.
 */
import type { JsonWhitespace, OutputGrammar, ToolCallSyntax } from "../engine/grammar.ts";
import { compileSchema, type JsonSchema, nestsTooDeeply, SchemaError } from "../engine/json-schema.ts";
import { compilePattern, RegexError } from "../engine/regex-nfa.ts";
import { compileGbnf } from "../engine/gbnf.ts";
import { ApiError, describe } from "./errors.ts";
import type { ChatRequest, CompletionRequest } from "./schemas.ts";

/** What a chat request's answer must be (undefined: free text), and whether it may hold several tool calls. */
export interface ChatGrammar {
  grammar: OutputGrammar | undefined;
  parallelToolCalls: boolean;
  /** The grammar only holds strict tools' calls ({@link strictCalls}): where none could apply, drop it (the answer free, as before), never refuse. */
  strictOnly?: true;
}

type Body = ChatRequest | CompletionRequest;

/**
 * Reads `tool_choice`, `response_format` and `structured_outputs`. A forced tool call wins over a
 * response format (its answer has no content); beside `structured_outputs` either is a 400. Tools
 * the model may call beside a JSON response format: calls or the answer's JSON ({@link callsOrAnswer}).
 * `whitespace`: how JSON may be spaced unless the request says (`serve --json-whitespace`); `format`:
 * how the model writes tool calls (`serve --tool-call-parser`).
 */
export function chatGrammar(body: ChatRequest, whitespace: JsonWhitespace = "any", format: ToolCallSyntax = "hermes"): ChatGrammar {
  const all = body.tools ?? [];
  let choice = body.tool_choice ?? "auto";
  const structured = structuredOutputs(body, whitespace);
  let tools = all;
  if (typeof choice !== "string" && choice.type === "allowed_tools") {
    // Every tool stays in the prompt (the template renders them all, so the cached prefix is the same
    // whichever are allowed); the output may call only these.
    const names = choice.allowed_tools.tools.map((t) => t.function.name);
    const missing = names.find((n) => !all.some((t) => t.function.name === n));
    if (missing !== undefined) throw new ApiError(400, `The function ${JSON.stringify(missing)} named by tool_choice.allowed_tools is not among the request's tools`, "tool_choice", "invalid_value");
    tools = all.filter((t) => names.includes(t.function.name));
    if (choice.allowed_tools.mode === "auto") return { grammar: allowedAuto(tools, body, structured, format), parallelToolCalls: body.parallel_tool_calls ?? true };
    choice = "required";
  }
  if (choice === "required" || typeof choice !== "string") {
    if (tools.length === 0) throw new ApiError(400, `Forcing a tool call with tool_choice ${describe(choice)} needs at least one function in tools`, "tool_choice", "invalid_value");
    const named = typeof choice === "string" ? tools : tools.filter((t) => t.function.name === choice.function.name);
    if (named.length === 0) {
      throw new ApiError(400, `The function ${JSON.stringify((choice as { function: { name: string } }).function.name)} named by tool_choice is not among the request's tools`, "tool_choice", "invalid_value");
    }
    if (structured.grammar !== undefined) {
      throw new ApiError(400, `A forced tool call (tool_choice ${describe(choice)}) cannot also follow ${structured.param}: give one of them`, structured.param, "invalid_value");
    }
    const forced = callableTools(named);
    // A named function is called once, as OpenAI does; "required" may call several unless told not to.
    const parallel = typeof choice === "string" && (body.parallel_tool_calls ?? true);
    const calls: OutputGrammar = { kind: "tool_calls", tools: forced, parallel, ...spacing(structured.whitespace), ...(format === "hermes" ? {} : { format }) };
    return { grammar: calls, parallelToolCalls: parallel };
  }
  const answer = formatOrStructured(body, structured);
  const parallel = body.parallel_tool_calls ?? true;
  if (choice === "auto" && tools.length > 0 && answer !== undefined) return { grammar: callsOrAnswer(tools, parallel, answer, structured, format), parallelToolCalls: parallel };
  const strict = choice === "auto" && answer === undefined ? strictCalls(tools, parallel, structured, format) : undefined;
  if (strict !== undefined) return { grammar: strict, parallelToolCalls: parallel, strictOnly: true };
  return { grammar: answer, parallelToolCalls: parallel };
}

/**
 * Strict tools (`strict: true`) under tool_choice "auto", whose arguments OpenAI guarantees: free text
 * where a call, once opened, names one of `tools`, a strict one's arguments following its schema (one
 * the decoder cannot follow: a 400 naming the tool), a non-strict one's any object (grammar.ts
 * `tool_calls` with `amidText`). Undefined (no grammar, as before) without a strict tool, in
 * harmony (gpt-oss), whose calls begin in a message header, not amid text.
 */
function strictCalls(tools: NonNullable<ChatRequest["tools"]>, parallel: boolean, structured: Structured, format: ToolCallSyntax): OutputGrammar | undefined {
  const isStrict = (t: (typeof tools)[number]) => t.function.strict === true;
  if (format === "harmony" || !tools.some(isStrict)) return undefined;
  const held = tools.map((t) => (isStrict(t) ? callableTools([t])[0] : { name: t.function.name }));
  return { kind: "tool_calls", tools: held, parallel, amidText: true, ...spacing(structured.whitespace), ...(format === "hermes" ? {} : { format }) };
}

/**
 * Tools the model may call beside a JSON `response_format` (json_object, json_schema): as OpenAI's API
 * answers, either tool calls in the model's syntax (as tool_choice "required" writes them) or the
 * answer's JSON, the model choosing as it writes (grammar.ts `union`; the chat output's tool-call
 * parser then reads calls from the one, content from the other). `structured_outputs` and a
 * structural tag keep vLLM's meaning, the whole answer; so does harmony (gpt-oss), whose calls begin
 * in a message header while its answer's format starts in the final message's body.
 */
function callsOrAnswer(tools: NonNullable<ChatRequest["tools"]>, parallel: boolean, answer: OutputGrammar, structured: Structured, format: ToolCallSyntax): OutputGrammar {
  if (answer.kind !== "json" || structured.grammar !== undefined || format === "harmony") return answer;
  const calls: OutputGrammar = { kind: "tool_calls", tools: callableTools(tools), parallel, ...spacing(structured.whitespace), ...(format === "hermes" ? {} : { format }) };
  return { kind: "union", options: [calls, answer] };
}

/**
 * allowed_tools in "auto" mode: free text, where tool calls, once the syntax's opening is written
 * (`<tool_call>`, `[TOOL_CALLS]`, a section's begin tag, Llama 3's `{"name"`), may only call
 * `tools`, with arguments that follow their parameters (grammar.ts `tool_calls` with `amidText`).
 * Harmony's calls begin in a message header, not amid text: a 400 that says to use "required". Beside
 * a JSON response format: calls of `tools` or the answer's JSON ({@link callsOrAnswer}).
 */
function allowedAuto(tools: NonNullable<ChatRequest["tools"]>, body: ChatRequest, structured: Structured, format: ToolCallSyntax): OutputGrammar {
  if (format === "harmony") {
    throw new ApiError(400, `tool_choice allowed_tools in mode "auto" cannot be followed in the harmony tool-call syntax, whose calls begin in a message header (use mode "required")`, "tool_choice", "invalid_value");
  }
  const answer = formatOrStructured(body, structured);
  if (answer !== undefined) {
    // Calls, or an answer that follows the response format: the same union as tool_choice "auto".
    const union = callsOrAnswer(tools, body.parallel_tool_calls ?? true, answer, structured, format);
    if (union.kind === "union") return union;
    const param = structured.grammar !== undefined ? structured.param : "response_format";
    throw new ApiError(400, `tool_choice allowed_tools in mode "auto" cannot also follow ${param}: give one of them`, param, "invalid_value");
  }
  return { kind: "tool_calls", tools: callableTools(tools), parallel: body.parallel_tool_calls ?? true, amidText: true, ...spacing(structured.whitespace), ...(format === "hermes" ? {} : { format }) };
}

/** The functions a `tool_calls` grammar may call: names and parameters, each schema checked (a 400 naming the function otherwise). */
function callableTools(tools: NonNullable<ChatRequest["tools"]>): { name: string; parameters?: JsonSchema }[] {
  return tools.map((t) => {
    const parameters = t.function.parameters as JsonSchema | undefined;
    checkSchema(parameters ?? true, "tools", `The parameters of function ${JSON.stringify(t.function.name)}`);
    return { name: t.function.name, ...(parameters === undefined ? {} : { parameters }) };
  });
}

/** Reads a completion request's `response_format` and `structured_outputs` (undefined: free text). */
export function completionGrammar(body: CompletionRequest, whitespace: JsonWhitespace = "any"): OutputGrammar | undefined {
  return formatOrStructured(body, structuredOutputs(body, whitespace));
}

/** The grammar of `response_format` or of `structured_outputs`; a 400 when both constrain. */
function formatOrStructured(body: Body, structured: Structured): OutputGrammar | undefined {
  const format = responseFormat(body, structured.whitespace);
  if (format !== undefined && structured.grammar !== undefined) {
    throw new ApiError(400, `A request may follow response_format or ${structured.param}, not both: give one of them`, structured.param, "invalid_value");
  }
  return format ?? structured.grammar;
}

function responseFormat(body: Body, whitespace: JsonWhitespace): OutputGrammar | undefined {
  const format = body.response_format;
  if (!format || format.type === "text") return undefined;
  if (format.type === "json_object") return { kind: "json", schema: { type: "object" }, ...spacing(whitespace) };
  if (format.type === "json_schema") {
    const spec = (format as { json_schema?: unknown }).json_schema;
    if (typeof spec !== "object" || spec === null || Array.isArray(spec)) {
      throw new ApiError(400, `A response_format of type json_schema needs a "json_schema" object with the schema, got ${describe(spec)}`, "response_format", "invalid_value");
    }
    const schema = (spec as { schema?: unknown }).schema ?? true;
    checkSchema(schema, "response_format", "The response_format schema");
    return { kind: "json", schema: schema as JsonSchema, ...spacing(whitespace) };
  }
  if (format.type === "structural_tag") return structuralTag(format, "response_format", whitespace);
  throw new ApiError(400, `The response_format type must be "text", "json_object", "json_schema" or "structural_tag", got ${describe(format.type)}`, "response_format", "invalid_value");
}

/**
 * vLLM's structural tag, `{"structures": [{"begin", "schema", "end"}], "triggers": [...]}` (as an
 * object, or as a JSON string in `structured_outputs.structural_tag`); each schema checked.
 */
function structuralTag(value: unknown, param: string, whitespace: JsonWhitespace): OutputGrammar {
  let v = value;
  if (typeof v === "string") {
    try {
      v = JSON.parse(v);
    } catch {
      throw new ApiError(400, `The ${param} string must hold a structural tag's JSON, got ${describe(value)}`, param, "invalid_value");
    }
  }
  const o = (typeof v === "object" && v !== null && !Array.isArray(v) ? v : {}) as { structures?: unknown; triggers?: unknown; format?: unknown };
  if (o.format !== undefined && o.structures === undefined) {
    throw new ApiError(400, `A structural tag in xgrammar's "format" form is not supported; give "structures" ([{"begin", "schema", "end"}]) and "triggers"`, param, "unsupported_parameter");
  }
  const isText = (x: unknown) => typeof x === "string";
  const triggers = o.triggers;
  if (!Array.isArray(triggers) || triggers.length === 0 || !triggers.every((t) => isText(t) && t !== "")) {
    throw new ApiError(400, `A structural tag needs "triggers", a list of non-empty strings, got ${describe(triggers)}`, param, "invalid_value");
  }
  const structures = o.structures;
  if (!Array.isArray(structures) || structures.length === 0) throw new ApiError(400, `A structural tag needs "structures", a non-empty list, got ${describe(structures)}`, param, "invalid_value");
  const parsed = structures.map((x, i) => {
    const st = (typeof x === "object" && x !== null ? x : {}) as { begin?: unknown; schema?: unknown; end?: unknown };
    if (!isText(st.begin) || !isText(st.end)) throw new ApiError(400, `Structure ${i} of the structural tag needs string "begin" and "end", got ${describe(x)}`, param, "invalid_value");
    const begin = st.begin as string;
    if (!triggers.some((t: string) => begin.startsWith(t))) {
      throw new ApiError(400, `Structure ${i}'s begin ${JSON.stringify(begin)} starts with none of the triggers ${JSON.stringify(triggers)}`, param, "invalid_value");
    }
    const schema = st.schema ?? true;
    checkSchema(schema, param, `The schema of structure ${i}`);
    return { begin, schema: schema as JsonSchema, end: st.end as string };
  });
  return { kind: "structural_tag", structures: parsed, triggers: triggers as string[], ...spacing(whitespace) };
}

/** What `structured_outputs` (or its `guided_*` names) asks: a grammar, where it was given, and JSON's spacing. */
interface Structured {
  grammar: OutputGrammar | undefined;
  /** The parameter that gave the grammar, for errors. */
  param: string;
  whitespace: JsonWhitespace;
}

/** The constraints `structured_outputs` may carry, with their older top-level names. */
const KINDS = [["json", "guided_json"], ["regex", "guided_regex"], ["choice", "guided_choice"], ["json_object", null], ["grammar", "guided_grammar"], ["structural_tag", null]] as const;

function structuredOutputs(body: Body, fallback: JsonWhitespace): Structured {
  const so = body.structured_outputs ?? undefined;
  const flat = body as Record<string, unknown>;
  // json_object asks for a constraint only when true; any other kind whenever it is there (a `json` of
  // false is a schema nothing matches: a 400).
  const asks = (kind: string, v: unknown) => (kind === "json_object" ? v === true : v !== undefined && v !== null);
  const legacy = KINDS.flatMap(([kind, old]) => (old !== null && asks(kind, flat[old]) ? [old] : []));
  if (so !== undefined && legacy.length > 0) {
    throw new ApiError(400, `Give structured_outputs or the older ${legacy[0]}, not both`, legacy[0], "invalid_value");
  }
  const given = so === undefined
    ? legacy.map((old) => ({ param: old, kind: KINDS.find(([, o]) => o === old)![0], value: flat[old] }))
    : KINDS.flatMap(([kind]) => (asks(kind, so[kind]) ? [{ param: `structured_outputs.${kind}`, kind, value: so[kind] }] : []));
  const pattern = so?.whitespace_pattern ?? body.guided_whitespace_pattern;
  if (pattern !== undefined && pattern !== null) {
    const param = so?.whitespace_pattern !== undefined ? "structured_outputs.whitespace_pattern" : "guided_whitespace_pattern";
    throw new ApiError(400, `A whitespace pattern is not supported, got ${describe(pattern)}; set structured_outputs.disable_any_whitespace to true for json.dumps spacing`, param, "unsupported_parameter");
  }
  const disable = so?.disable_any_whitespace;
  const whitespace: JsonWhitespace = disable === true ? "compact" : disable === false ? "any" : fallback;
  if (given.length > 1) {
    throw new ApiError(400, `Give one kind of structured output, got ${given.map((g) => g.param).join(" and ")}`, given[1].param, "invalid_value");
  }
  if (given.length === 0) return { grammar: undefined, param: "structured_outputs", whitespace };
  const { param, kind, value } = given[0];
  return { grammar: structuredGrammar(kind, value, param, whitespace), param, whitespace };
}

function structuredGrammar(kind: (typeof KINDS)[number][0], value: unknown, param: string, whitespace: JsonWhitespace): OutputGrammar {
  switch (kind) {
    case "json": {
      let schema = value;
      if (typeof value === "string") {
        try {
          schema = JSON.parse(value);
        } catch {
          throw new ApiError(400, `The ${param} string must hold a JSON schema, got ${describe(value)}`, param, "invalid_value");
        }
      }
      checkSchema(schema, param, `The ${param} schema`);
      return { kind: "json", schema: schema as JsonSchema, ...spacing(whitespace) };
    }
    case "json_object": return { kind: "json", schema: { type: "object" }, ...spacing(whitespace) };
    case "regex": {
      const pattern = value as string;
      try {
        compilePattern(pattern, true);
      } catch (e) {
        if (e instanceof RegexError) throw new ApiError(400, `The ${param} cannot be followed: ${lowerFirst(e.message)}`, param, "invalid_value");
        throw e;
      }
      return { kind: "regex", pattern };
    }
    case "choice": {
      const choices = value as string[];
      const empty = choices.indexOf("");
      if (empty >= 0) throw new ApiError(400, `Every choice needs at least one character; ${param}[${empty}] is the empty string`, param, "invalid_value");
      return { kind: "choice", choices };
    }
    case "grammar": {
      if (typeof value !== "string") throw new ApiError(400, `The ${param} must be a string holding a GBNF grammar, got ${describe(value)}`, param, "invalid_value");
      try {
        compileGbnf(value);
      } catch (e) {
        if (e instanceof SchemaError) throw new ApiError(400, `The ${param} cannot be followed: ${lowerFirst(e.message)} (read as GBNF: rules written name ::= expression, the output matching root)`, param, "invalid_value");
        if (nestsTooDeeply(e)) throw new ApiError(400, `The ${param} cannot be followed: it nests too deeply`, param, "invalid_value");
        throw e;
      }
      return { kind: "gbnf", grammar: value };
    }
    case "structural_tag": return structuralTag(value, param, whitespace);
  }
}

/** The grammar field for `whitespace` (absent for the default, so plain grammars stay as they were). */
function spacing(whitespace: JsonWhitespace): { whitespace?: JsonWhitespace } {
  return whitespace === "compact" ? { whitespace } : {};
}

/** A 400 naming `param` (`what` cannot be followed) when the decoder cannot follow `schema`. */
export function checkSchema(schema: unknown, param: string, what: string): void {
  try {
    compileSchema(schema);
  } catch (e) {
    if (e instanceof SchemaError) throw new ApiError(400, `${what} cannot be followed: ${lowerFirst(e.message)}`, param, "invalid_value");
    if (nestsTooDeeply(e)) throw new ApiError(400, `${what} cannot be followed: it nests too deeply`, param, "invalid_value");
    throw e;
  }
}

function lowerFirst(s: string): string {
  return s.charAt(0).toLowerCase() + s.slice(1);
}
