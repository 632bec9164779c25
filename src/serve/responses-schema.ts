/**
 * The request body of OpenAI's Responses API (`POST /v1/responses`), as far as a server of function
 * tools and text can honour it: input items (messages, function calls, their outputs, reasoning),
 * `instructions`, `previous_response_id`, function tools, `tool_choice`, `text.format`. What it names
 * but cannot honour (images, hosted tools) is refused by name.
 */
import { z } from "zod";
import { REASONING_EFFORTS } from "./reasoning-effort.ts";
import { cacheSaltField, explained, type Flaw, isObject, priorityField, SERVICE_TIERS, sessionKey } from "./schemas.ts";

const maybe = <T extends z.ZodType>(t: T) => t.nullable().optional();
const positiveInt = z.number().int().min(1);

/** A text part of an input or output message, or an input image (its `image_url`, a base64 data URL: serve/prompt-images.ts). */
export interface TextPartIn {
  type: "input_text" | "output_text" | "refusal" | "input_image";
  text?: string;
  refusal?: string;
  image_url?: string;
  detail?: string;
}
/** A message item (`type` may be left out). */
export interface MessageItemIn {
  type?: "message";
  id?: string;
  role: "user" | "assistant" | "system" | "developer";
  content: string | TextPartIn[];
}
/** A call the model made in an earlier turn. */
export interface FunctionCallItemIn {
  type: "function_call";
  id?: string;
  call_id: string;
  name: string;
  arguments: string;
}
/** What the client's tool returned for a call. */
export interface FunctionCallOutputItemIn {
  type: "function_call_output";
  id?: string;
  call_id: string;
  output: string | TextPartIn[];
}
/**
 * The model's reasoning in an earlier turn: its text parts, or, without them, the `encrypted_content`
 * this server gave it (another server's is not ours to read, and is ignored).
 */
export interface ReasoningItemIn {
  type: "reasoning";
  id?: string;
  summary?: { type: "summary_text"; text: string }[];
  content?: { type: "reasoning_text"; text: string }[];
  encrypted_content?: string | null;
}
/** One input item. */
export type InputItem = MessageItemIn | FunctionCallItemIn | FunctionCallOutputItemIn | ReasoningItemIn;

const ROLES = ["user", "assistant", "system", "developer"];
const TEXT_PARTS = ["input_text", "output_text", "refusal", "input_image"];

/** What is wrong with a message's (or a tool output's) content, if anything. */
function contentFlaw(v: unknown, at: (string | number)[]): Flaw | null {
  if (typeof v === "string") return null;
  if (!Array.isArray(v)) return { message: "content must be a string or an array of text parts", path: at };
  for (const [i, part] of v.entries()) {
    if (!isObject(part)) return { message: 'content parts must be objects like {"type": "input_text", "text": "..."}', path: [...at, i] };
    if (!TEXT_PARTS.includes(part.type as string)) {
      return { message: `only text and image parts (input_text, output_text, refusal, input_image) are supported, got a part of type ${JSON.stringify(part.type)}`, path: [...at, i, "type"] };
    }
    if (part.type === "input_image") {
      if (typeof part.image_url === "string") continue;
      const why = part.file_id !== undefined ? "images by file_id are not supported (this server stores no files): send image_url" : "an input_image part needs its image_url (a base64 data URL)";
      return { message: why, path: [...at, i, "image_url"] };
    }
    const key = part.type === "refusal" ? "refusal" : "text";
    if (typeof part[key] !== "string") return { message: `a ${part.type} part's ${key} must be a string`, path: [...at, i, key] };
  }
  return null;
}

const str = (o: Record<string, unknown>, key: string, at: (string | number)[], what: string): Flaw | null =>
  typeof o[key] === "string" && (o[key] as string).length > 0 ? null : { message: `${what} needs a non-empty string ${key}`, path: [...at, key] };

/** What is wrong with one input item, if anything. */
function itemFlaw(item: unknown, i: number, references: boolean): Flaw | null {
  if (!isObject(item)) return { message: "input items must be objects", path: [i] };
  const type = item.type ?? "message";
  switch (type) {
    case "message":
      if (!ROLES.includes(item.role as string)) return { message: `a message's role must be one of ${ROLES.join(", ")}, got ${JSON.stringify(item.role)}`, path: [i, "role"] };
      return contentFlaw(item.content, [i, "content"]);
    case "function_call":
      return str(item, "call_id", [i], "a function_call item") ?? str(item, "name", [i], "a function_call item") ??
        (typeof item.arguments === "string" ? null : { message: "a function_call item needs its arguments as a JSON string", path: [i, "arguments"] });
    case "function_call_output":
      return str(item, "call_id", [i], "a function_call_output item") ?? contentFlaw(item.output, [i, "output"]);
    case "reasoning": {
      for (const key of ["summary", "content"]) {
        const list = item[key];
        if (list === undefined || list === null) continue;
        if (!Array.isArray(list) || list.some((p) => !isObject(p) || typeof p.text !== "string")) {
          return { message: `a reasoning item's ${key} must be an array of parts with text`, path: [i, key] };
        }
      }
      if (item.encrypted_content !== undefined && item.encrypted_content !== null && typeof item.encrypted_content !== "string") {
        return { message: "a reasoning item's encrypted_content must be a string", path: [i, "encrypted_content"] };
      }
      return null;
    }
    case "item_reference":
      // A request's input may point at an item this server stored (item-references.ts); stored lists hold items only.
      if (!references) return { message: "item_reference items cannot be stored in a conversation: send the item itself", path: [i, "type"] };
      return str(item, "id", [i], "an item_reference item");
    default:
      return { message: `input items of type ${JSON.stringify(type)} are not supported (this server takes messages, function_call, function_call_output and reasoning items)`, path: [i, "type"] };
  }
}

/** The most input items one request may carry. */
export const MAX_INPUT_ITEMS = 4096;

/** What is wrong with a list of items, if anything (`what`: how the list is named in messages). */
function itemsFlaw(v: unknown, what: string, min: number, references = false): Flaw | null {
  if (!Array.isArray(v)) return { message: `${what} must be an array of items` };
  if (v.length < min) return { message: `the ${what} array is empty` };
  if (v.length > MAX_INPUT_ITEMS) return { message: `at most ${MAX_INPUT_ITEMS} ${what} items are supported, got ${v.length}` };
  for (const [i, item] of v.entries()) {
    const f = itemFlaw(item, i, references);
    if (f) return f;
  }
  return null;
}

// Optional, as OpenAI's is: a turn may answer a conversation (or continue a response) as it stands (responses.ts).
const Input = explained(z.union([z.string(), z.array(z.unknown()).min(1).max(MAX_INPUT_ITEMS)]), (v): Flaw | null => {
  if (typeof v === "string" || v === undefined || v === null) return null;
  if (!Array.isArray(v)) return { message: "input must be a string or an array of input items" };
  return itemsFlaw(v, "input", 1, true);
});

/** A list of items as a conversation holds them (`min`: the fewest allowed). */
export const itemList = (min: number) => explained(z.array(z.unknown()).min(min).max(MAX_INPUT_ITEMS), (v) => itemsFlaw(v, "items", min));

/** OpenAI's bounds on `metadata`: keys, and the characters of a key and of a value. */
const METADATA_KEYS = 16, METADATA_KEY_CHARS = 64, METADATA_VALUE_CHARS = 512;

/** Up to 16 string pairs, as OpenAI's `metadata` fields are; a flaw names the bound and the key it breaks. */
export const Metadata = explained(
  z.record(z.string().max(METADATA_KEY_CHARS), z.string().max(METADATA_VALUE_CHARS)).refine((m) => Object.keys(m).length <= METADATA_KEYS),
  (v): Flaw | null => {
    if (v === undefined || v === null || !isObject(v)) return null;
    const keys = Object.keys(v);
    if (keys.length > METADATA_KEYS) return { message: `metadata may hold at most ${METADATA_KEYS} keys, got ${keys.length}` };
    for (const k of keys) {
      if (k.length > METADATA_KEY_CHARS) return { message: `metadata keys may be at most ${METADATA_KEY_CHARS} characters, got the key ${JSON.stringify(k)} (${k.length} characters)` };
      const value = v[k];
      if (typeof value !== "string") return { message: `metadata values must be strings`, path: [k] };
      if (value.length > METADATA_VALUE_CHARS) return { message: `metadata values may be at most ${METADATA_VALUE_CHARS} characters, got ${value.length}`, path: [k] };
    }
    return null;
  },
);

/** `conversation`: a conversation's id, or `{"id": ...}`. */
const ConversationRef = explained(z.union([z.string().min(1), z.looseObject({ id: z.string().min(1) })]), (v): Flaw | null =>
  v === undefined || v === null || (typeof v === "string" && v !== "") || (isObject(v) && typeof v.id === "string" && v.id !== "")
    ? null
    : { message: 'conversation must be a conversation id or {"id": "conv_..."}' });

/** A function tool, in the Responses API's flat shape. */
const FunctionTool = z.looseObject({
  type: z.literal("function"),
  name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "must be 1-64 letters, digits, underscores or dashes"),
  description: maybe(z.string()),
  parameters: maybe(z.record(z.string(), z.unknown())),
  strict: maybe(z.boolean()),
});
/** A function tool as the schema reads it. */
export type FunctionToolIn = z.infer<typeof FunctionTool>;

/**
 * Tools that OpenAI runs on its side (search, code interpreter, image generation, computer use, MCP,
 * shells). This server runs none of them: they are accepted, so that clients which always offer one
 * (Codex CLI offers web_search) are answered, and not shown to the model.
 */
export const HOSTED_TOOL_TYPES = [
  "web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11", "file_search", "code_interpreter",
  "image_generation", "computer_use_preview", "computer", "mcp", "local_shell", "shell", "tool_search",
];

/** Function tools grouped under a name (Codex CLI groups its sub-agent tools so). */
const NamespaceTool = z.looseObject({
  type: z.literal("namespace"),
  name: z.string().min(1),
  description: maybe(z.string()),
  tools: z.array(FunctionTool).max(128),
});
/** A namespace of function tools as the schema reads it. */
export type NamespaceToolIn = z.infer<typeof NamespaceTool>;

const HostedTool = z.looseObject({ type: z.enum(HOSTED_TOOL_TYPES) });

/** What is wrong with a tool's type, if anything (`at`: its path). */
function toolTypeFlaw(t: unknown, at: (string | number)[]): Flaw | null {
  if (!isObject(t) || t.type === "function" || HOSTED_TOOL_TYPES.includes(t.type as string)) return null;
  if (t.type === "namespace") {
    const i = Array.isArray(t.tools) ? t.tools.findIndex((inner) => isObject(inner) && inner.type !== "function") : -1;
    if (i < 0) return null;
    return { message: `a namespace may hold only function tools here, got a tool of type ${JSON.stringify((t.tools as Record<string, unknown>[])[i].type)}`, path: [...at, "tools", i, "type"] };
  }
  const custom = t.type === "custom" ? " (custom tools, whose input is free text, are not supported: declare a function tool with a string parameter)" : "";
  return { message: `only function and namespace tools are supported, got a tool of type ${JSON.stringify(t.type)}${custom}`, path: [...at, "type"] };
}

const Tools = explained(z.array(z.union([FunctionTool, NamespaceTool, HostedTool])).max(128), (v): Flaw | null => {
  if (!Array.isArray(v)) return null;
  for (const [i, t] of v.entries()) {
    const f = toolTypeFlaw(t, [i]);
    if (f) return f;
  }
  return null;
});

const ToolChoice = explained(
  z.union([
    z.enum(["none", "auto", "required"]),
    z.looseObject({ type: z.literal("function"), name: z.string() }),
    z.looseObject({ type: z.literal("allowed_tools"), mode: z.enum(["auto", "required"]), tools: z.array(z.looseObject({ type: z.literal("function"), name: z.string() })).min(1) }),
  ]),
  (v): Flaw | null => {
    if (v === "none" || v === "auto" || v === "required" || v === null || v === undefined) return null;
    if (isObject(v) && v.type === "function" && typeof v.name === "string") return null;
    if (isObject(v) && v.type === "allowed_tools") {
      if (v.mode !== "auto" && v.mode !== "required") return { message: 'allowed_tools needs a mode of "auto" or "required"', path: ["mode"] };
      const ok = Array.isArray(v.tools) && v.tools.length > 0 && v.tools.every((t) => isObject(t) && t.type === "function" && typeof t.name === "string");
      return ok ? null : { message: 'allowed_tools.tools must list at least one {"type": "function", "name": "..."}', path: ["tools"] };
    }
    return { message: 'tool_choice must be "none", "auto", "required", {"type": "function", "name": "..."} or {"type": "allowed_tools", "mode", "tools"}' };
  },
);

/** `text.format`: free text, JSON mode, or a JSON schema. */
const TextFormat = explained(
  z.union([
    z.looseObject({ type: z.enum(["text", "json_object"]) }),
    z.looseObject({ type: z.literal("json_schema"), name: maybe(z.string()), schema: z.record(z.string(), z.unknown()), strict: maybe(z.boolean()), description: maybe(z.string()) }),
  ]),
  (v): Flaw | null => {
    if (!isObject(v)) return { message: 'text.format must be an object such as {"type": "text"}' };
    if (v.type === "text" || v.type === "json_object") return null;
    if (v.type !== "json_schema") return { message: `the format type must be "text", "json_object" or "json_schema", got ${JSON.stringify(v.type)}`, path: ["type"] };
    return isObject(v.schema) ? null : { message: "a json_schema format needs its schema as an object", path: ["schema"] };
  },
);

/** POST /v1/responses */
export const ResponsesRequestSchema = z.looseObject({
  model: z.string().min(1),
  input: maybe(Input),
  instructions: maybe(z.string()),
  previous_response_id: maybe(z.string().min(1)),
  tools: maybe(Tools),
  tool_choice: maybe(ToolChoice),
  parallel_tool_calls: maybe(z.boolean()),
  max_tool_calls: maybe(positiveInt),
  text: maybe(z.looseObject({ format: maybe(TextFormat) })),
  max_output_tokens: maybe(positiveInt),
  temperature: maybe(z.number().min(0).max(2)),
  top_p: maybe(z.number().gt(0).max(1)),
  // vLLM's extensions, kept here for reproducible runs.
  top_k: maybe(z.number().int().min(-1)),
  seed: maybe(z.number().int().min(-(2 ** 53)).max(2 ** 53)),
  // vLLM's extension, as on chat completions: lower is scheduled first.
  priority: priorityField,
  cache_salt: cacheSaltField,
  service_tier: maybe(z.enum(SERVICE_TIERS)),
  stream: maybe(z.boolean()),
  store: maybe(z.boolean()),
  metadata: maybe(Metadata),
  user: maybe(sessionKey),
  prompt_cache_key: maybe(sessionKey),
  reasoning: maybe(z.looseObject({ effort: maybe(z.enum(REASONING_EFFORTS)), summary: maybe(z.string()) })),
  // Parsed to be refused (or accepted at their no-op values) by name in responses.ts.
  background: maybe(z.boolean()),
  truncation: maybe(z.enum(["auto", "disabled"])),
  include: maybe(z.array(z.string())),
  conversation: maybe(ConversationRef),
  prompt: z.unknown().optional(),
  top_logprobs: maybe(z.number().int().min(0).max(20)),
});

/** A parsed Responses request. */
export type ResponsesRequest = z.infer<typeof ResponsesRequestSchema>;
