/**
 * zod schema of the Anthropic Messages API request body (`POST /v1/messages`, what Claude Code and
 * the `@anthropic-ai/sdk` client send) that this server answers: text, tool use and tool results,
 * thinking blocks sent back. Unknown fields are ignored, as Anthropic's API does with new ones; known
 * fields are checked so a bad value gets a 400 that names it, and content the models here cannot read
 * (documents; images where no vision projector is loaded, serve/prompt-images.ts) or tools they cannot
 * run (Anthropic's server and built-in tools) is refused by name rather than dropped.
 */
import { z } from "zod";
import { describe } from "./errors.ts";
import { explained, type Flaw, isObject, sessionKey } from "./schemas.ts";

/** Content block types a message may carry here. */
const BLOCK_TYPES = ["text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"];

/** What is wrong with an image block (null: nothing): its source base64 data with a media type, or a URL. */
function imageFlaw(b: Record<string, unknown>, path: (string | number)[]): Flaw | null {
  const src = b.source;
  const shape = 'an image block is {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "..."}}';
  if (!isObject(src)) return { message: shape, path: [...path, "source"] };
  if (src.type === "base64") {
    if (typeof src.media_type !== "string" || typeof src.data !== "string") return { message: shape, path: [...path, "source"] };
    return null;
  }
  if (src.type === "url") return typeof src.url === "string" ? null : { message: "an image block's url source needs a string url", path: [...path, "source", "url"] };
  return { message: `image sources of type ${JSON.stringify(src.type)} are not supported (base64 or url)`, path: [...path, "source", "type"] };
}

/** What is wrong with one content block (null: nothing), `path` inside the content array. */
function blockFlaw(b: unknown, role: string, path: (string | number)[]): Flaw | null {
  if (!isObject(b)) return { message: 'content blocks must be objects like {"type": "text", "text": "..."}', path };
  if (!BLOCK_TYPES.includes(b.type as string)) {
    return { message: `content blocks of type ${JSON.stringify(b.type)} are not supported (only ${BLOCK_TYPES.join(", ")}: the models here read text)`, path: [...path, "type"] };
  }
  const str = (k: string, what: string) => (typeof b[k] === "string" ? null : { message: `${what} must be a string`, path: [...path, k] });
  const fromAssistant = b.type === "tool_use" || b.type === "thinking" || b.type === "redacted_thinking";
  if (fromAssistant && role !== "assistant") return { message: `a ${b.type} block belongs in an assistant message, got one in a ${role} message`, path: [...path, "type"] };
  if (b.type !== "text" && role === "system") return { message: `a system message holds only text blocks, got a ${b.type} block`, path: [...path, "type"] };
  if (b.type === "tool_result" && role !== "user") return { message: `a tool_result block belongs in a user message, got one in a ${role} message`, path: [...path, "type"] };
  if (b.type === "image" && role !== "user") return { message: `an image block belongs in a user message, got one in a ${role} message`, path: [...path, "type"] };
  switch (b.type) {
    case "text":
      return str("text", "a text block's text");
    case "image":
      return imageFlaw(b, path);
    case "thinking":
      return str("thinking", "a thinking block's thinking");
    case "tool_use":
      if (!isObject(b.input)) return { message: "a tool_use block's input must be an object", path: [...path, "input"] };
      return str("id", "a tool_use block's id") ?? str("name", "a tool_use block's name");
    case "tool_result": {
      const bad = str("tool_use_id", "a tool_result block's tool_use_id");
      if (bad) return bad;
      const c = b.content;
      if (c === undefined || typeof c === "string") return null;
      if (!Array.isArray(c)) return { message: "a tool_result block's content must be a string or an array of text and image blocks", path: [...path, "content"] };
      for (const [i, part] of c.entries()) {
        if (isObject(part) && part.type === "image") {
          const flaw = imageFlaw(part, [...path, "content", i]);
          if (flaw) return flaw;
          continue;
        }
        if (!isObject(part) || part.type !== "text" || typeof part.text !== "string") {
          return { message: `a tool_result block's content may hold only text and image blocks, got ${isObject(part) ? `type ${JSON.stringify(part.type)}` : JSON.stringify(part)}`, path: [...path, "content", i] };
        }
      }
      return null;
    }
    default:
      return null;
  }
}

/** A message's flaw: a role the API knows, and content as a string or blocks it can read. */
function messageFlaw(m: unknown): Flaw | null {
  if (!isObject(m)) return { message: 'messages must be objects like {"role": "user", "content": "..."}' };
  // Claude Code sends "system" messages between turns too (reminders), beside the top-level system prompt.
  if (m.role !== "user" && m.role !== "assistant" && m.role !== "system") return { message: `a message's role must be "user", "assistant" or "system", got ${JSON.stringify(m.role)}`, path: ["role"] };
  if (typeof m.content === "string") return null;
  if (!Array.isArray(m.content)) return { message: "a message's content must be a string or an array of content blocks", path: ["content"] };
  for (const [i, b] of m.content.entries()) {
    const f = blockFlaw(b, m.role, ["content", i]);
    if (f) return f;
  }
  return null;
}

const TextBlock = z.looseObject({ type: z.literal("text"), text: z.string() });

/** An image's source: base64 data with its media type, or a URL. */
const ImageSource = z.looseObject({ type: z.enum(["base64", "url"]), media_type: z.string().optional(), data: z.string().optional(), url: z.string().optional() });
const ImageBlock = z.looseObject({ type: z.literal("image"), source: ImageSource });

/** One content block, after the checks above. */
export const ContentBlockSchema = z.looseObject({
  type: z.enum(["text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"]),
  source: ImageSource.optional(),
  text: z.string().optional(),
  thinking: z.string().optional(),
  id: z.string().optional(),
  name: z.string().optional(),
  input: z.record(z.string(), z.unknown()).optional(),
  tool_use_id: z.string().optional(),
  content: z.union([z.string(), z.array(z.union([TextBlock, ImageBlock]))]).optional(),
  is_error: z.boolean().optional(),
});

/** One message of the conversation. */
export const MessageParamSchema = explained(
  z.looseObject({ role: z.enum(["user", "assistant", "system"]), content: z.union([z.string(), z.array(ContentBlockSchema)]) }),
  messageFlaw,
);

/** What a Messages tool's name may hold (Anthropic's pattern). */
const TOOL_NAME = /^[A-Za-z0-9_-]{1,128}$/;

/** A tool the model may call: Anthropic's custom tool (name, description, JSON Schema of its input). */
const ToolSchema = explained(
  z.looseObject({ name: z.string().min(1), description: z.string().optional(), input_schema: z.record(z.string(), z.unknown()), type: z.string().optional() }),
  (t) => {
    if (!isObject(t)) return { message: 'tools must be objects like {"name": "...", "input_schema": {...}}' };
    if (t.type !== undefined && t.type !== null && t.type !== "custom") {
      return { message: `only custom tools (a name and an input_schema) are supported, got a tool of type ${JSON.stringify(t.type)}: this server runs no tools of its own`, path: ["type"] };
    }
    if (!isObject(t.input_schema)) return { message: "a tool's input_schema must be a JSON Schema object", path: ["input_schema"] };
    // Anthropic's rule; the name is what the model writes back in its call, so it must be plain.
    if (typeof t.name === "string" && !TOOL_NAME.test(t.name)) {
      return { message: `must be 1-128 letters, digits, underscores or dashes, got ${JSON.stringify(t.name.slice(0, 140))}`, path: ["name"] };
    }
    return null;
  },
);

const ToolChoiceSchema = z.discriminatedUnion("type", [
  z.looseObject({ type: z.literal("auto"), disable_parallel_tool_use: z.boolean().optional() }),
  z.looseObject({ type: z.literal("any"), disable_parallel_tool_use: z.boolean().optional() }),
  z.looseObject({ type: z.literal("tool"), name: z.string().min(1), disable_parallel_tool_use: z.boolean().optional() }),
  z.looseObject({ type: z.literal("none") }),
]);

/**
 * Structured outputs: the answer's text follows a JSON Schema (`output_config.format`, or
 * `output_format`, the structured-outputs beta's name). Whether the decoder can follow the schema
 * is checked before it is submitted (messages.ts), so a schema it cannot follow is a 400 too.
 */
const OutputFormatSchema = z.looseObject({
  type: z.literal("json_schema", { error: (iss) => `only "json_schema" is supported, got ${JSON.stringify(iss.input)}` }),
  schema: z.record(z.string(), z.unknown(), { error: "must be a JSON Schema object" }),
});

/** The most stop sequences one request may give (Anthropic sets no small limit; this bounds the work per token). */
export const MAX_STOP_SEQUENCES = 16;

/** `POST /v1/messages` (and, without `max_tokens`, `/v1/messages/count_tokens`). */
export const MessagesRequestSchema = z.looseObject({
  model: z.string().min(1),
  max_tokens: z.number().int().min(1),
  messages: z.array(MessageParamSchema).min(1, { error: "must hold at least one message" }),
  system: z.union([z.string(), z.array(TextBlock)]).optional(),
  stop_sequences: z.array(z.string()).max(MAX_STOP_SEQUENCES).optional(),
  stream: z.boolean().optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().gt(0).max(1).optional(),
  top_k: z.number().int().min(0).optional(),
  // As chat completions': a forced call's grammar follows every tool's name at once (10000 took seconds a token).
  tools: z.array(ToolSchema).max(128).optional(),
  tool_choice: ToolChoiceSchema.optional(),
  metadata: z.looseObject({ user_id: sessionKey.nullable().optional() }).optional(),
  // display: "omitted" returns thinking blocks without their text (messages-thinking.ts); a value this
  // server does not know (Anthropic adds them) is shown as "summarized" is, not a 400 for Claude Code.
  thinking: z.looseObject({ type: z.enum(["enabled", "adaptive", "disabled"]), budget_tokens: z.number().int().min(0).optional(), display: z.string().nullable().optional() }).optional(),
  // An effort this server does not know (Anthropic adds levels) is no template's variable, not a 400 for Claude Code (messages.ts).
  output_config: z.looseObject({ effort: z.string().nullable().optional(), format: OutputFormatSchema.nullable().optional() }).optional(),
  output_format: OutputFormatSchema.nullable().optional(),
  // Anthropic's MCP connector runs the servers' tools on Anthropic's side; this server runs none.
  mcp_servers: z.array(z.unknown()).max(0, {
    error: "MCP servers are not supported: this server runs no tools of its own (connect them in the client and send their tools as custom tools)",
  }).optional(),
});

/** A checked Messages request. */
export type MessagesRequest = z.infer<typeof MessagesRequestSchema>;
/** What a request's prompt is made of (count_tokens sends only this). */
export type MessagesPrompt = Pick<MessagesRequest, "model" | "messages" | "system" | "tools" | "tool_choice" | "metadata" | "thinking" | "output_config" | "output_format">;
/** A checked content block. */
export type ContentBlockIn = z.infer<typeof ContentBlockSchema>;

/** `POST /v1/messages/count_tokens`: a Messages request without the generation settings. */
export const CountTokensRequestSchema = MessagesRequestSchema.omit({ max_tokens: true, stream: true, stop_sequences: true, temperature: true, top_p: true, top_k: true });

/**
 * The refusal of a request that asks for a message thread (`thread`: the conversation held on the
 * server, each turn sending only new messages), which this server does not keep: null when none is
 * asked. Its `thread_unsupported_request` code is what `@anthropic-ai/sdk`'s tool runner (threaded
 * by default) reads to send the whole history instead; ignored, the thread's later turns would be
 * answered without their history.
 */
export function threadRefusal(body: MessagesRequest): Record<string, unknown> | null {
  if (body.thread === undefined || body.thread === null) return null;
  const message = `Message threads are not supported, got thread ${describe(body.thread)}: this server keeps no conversation between requests; send the whole conversation in messages`;
  return { type: "error", error: { type: "invalid_request_error", message, details: { error_code: "thread_unsupported_request", unsupported: ["thread"] } } };
}
