/**
 * zod schemas of the OpenAI request bodies we accept. Unknown fields are ignored (as OpenAI does);
 * known fields are checked for type and range so a bad value gets a 400 that names it.
 */
import { z } from "zod";
import { REASONING_EFFORTS } from "./reasoning-effort.ts";

const maybe = <T extends z.ZodType>(t: T) => t.nullable().optional();
const positiveInt = z.number().int().min(1);

/** What is wrong with a value: a message and, when it is inside the value, where. */
export interface Flaw {
  message: string;
  path?: (string | number)[];
}

/**
 * `schema`, checked first by `flaw`, which says in words what is wrong and where: a union's own
 * error ("Invalid input") names neither. `flaw` must accept only what `schema` accepts.
 */
export function explained<T extends z.ZodType>(schema: T, flaw: (v: unknown) => Flaw | null) {
  return z.unknown().superRefine((v, ctx) => {
    const f = flaw(v);
    if (f) ctx.addIssue({ code: "custom", message: f.message, path: f.path ?? [], input: v });
  }).pipe(schema);
}

/** True for a plain JSON object (not null, not an array). */
export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isTokenId = (v: unknown) => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;

/** The longest session key (`prompt_cache_key`, `user`) accepted: the engine keeps keys for an hour. */
export const MAX_SESSION_KEY_CHARS = 512;
/** A session key field (`prompt_cache_key`, `user`). */
export const sessionKey = z.string().max(MAX_SESSION_KEY_CHARS, {
  error: (iss) => `must be at most ${MAX_SESSION_KEY_CHARS} characters, got ${typeof iss.input === "string" ? iss.input.length : "?"} characters`,
});

/** A text part of a multi-part message content. */
const TextPart = z.object({ type: z.literal("text"), text: z.string() });

/** An image part: its URL (a base64 data URL: serve/prompt-images.ts) and OpenAI's detail, which does not change what is read. */
const ImagePart = z.object({ type: z.literal("image_url"), image_url: z.object({ url: z.string(), detail: z.string().optional() }) });

/** A message's content: text, or text and image parts (images need a vision projector: --mmproj). */
const Content = explained(z.union([z.string(), z.array(z.union([TextPart, ImagePart]))]), (v) => {
  if (typeof v === "string" || v === null || v === undefined) return null;
  if (!Array.isArray(v)) return { message: "content must be a string or an array of text and image parts" };
  for (const [i, part] of v.entries()) {
    if (!isObject(part)) return { message: 'content parts must be objects like {"type": "text", "text": "..."}', path: [i] };
    if (part.type === "image_url") {
      const image = part.image_url;
      if (!isObject(image) || typeof image.url !== "string") return { message: 'an image part is {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}', path: [i, "image_url"] };
      continue;
    }
    if (part.type !== "text") return { message: `only text and image_url parts are supported, got a part of type ${JSON.stringify(part.type)}`, path: [i] };
    if (typeof part.text !== "string") return { message: "a text part's text must be a string", path: [i, "text"] };
  }
  return null;
});

/**
 * What is wrong with an assistant message's `tool_calls` (templates read them: a malformed one would
 * render as garbage or fail deep in the template), or null. Arguments are JSON text as OpenAI sends
 * them, an object, or missing (vLLM takes that as `{}`).
 */
function toolCallsFlaw(calls: unknown): Flaw | null {
  if (calls === null || calls === undefined) return null;
  if (!Array.isArray(calls)) return { message: "tool_calls must be an array of tool calls" };
  for (const [i, c] of calls.entries()) {
    const call = 'a tool call is {"id": "...", "type": "function", "function": {"name": "...", "arguments": "..."}}';
    if (!isObject(c)) return { message: call, path: [i] };
    if (c.id !== undefined && c.id !== null && typeof c.id !== "string") return { message: `a tool call's id must be a string, got ${JSON.stringify(c.id)}`, path: [i, "id"] };
    if (c.type !== undefined && c.type !== null && c.type !== "function") return { message: `only tool calls of type "function" are supported, got ${JSON.stringify(c.type)}`, path: [i, "type"] };
    const f = c.function;
    if (!isObject(f)) return { message: call, path: [i, "function"] };
    if (typeof f.name !== "string") return { message: `a tool call's function name must be a string, got ${JSON.stringify(f.name)}`, path: [i, "function", "name"] };
    const a = f.arguments;
    if (a !== undefined && a !== null && typeof a !== "string" && !isObject(a)) return { message: `a tool call's arguments must be JSON text, got ${JSON.stringify(a)}`, path: [i, "function", "arguments"] };
  }
  return null;
}

/** One chat message. Only an assistant message that calls tools may leave its content out. */
export const ChatMessageSchema = z.looseObject({
  role: z.enum(["system", "developer", "user", "assistant", "tool"]),
  content: maybe(Content),
  name: z.string().optional(),
}).superRefine((m, ctx) => {
  const calls = (m as Record<string, unknown>).tool_calls;
  const flaw = m.role === "assistant" ? toolCallsFlaw(calls) : null;
  if (flaw) ctx.addIssue({ code: "custom", message: flaw.message, path: ["tool_calls", ...(flaw.path ?? [])], input: calls });
  if (m.content !== null && m.content !== undefined) return;
  if (m.role === "assistant" && Array.isArray(calls) && calls.length > 0) return;
  const who = m.role === "assistant" ? "an assistant message without tool_calls" : `a ${m.role} message`;
  ctx.addIssue({ code: "custom", message: `${who} needs content`, path: ["content"], input: m.content });
});

/**
 * At most this many stop sequences. OpenAI allows 4, vLLM any number; agent frameworks written for
 * local models send more than 4, so this follows vLLM up to a bound that keeps the per-token stop scan cheap.
 */
const MAX_STOP = 64;
const Stop = explained(z.union([z.string(), z.array(z.string()).max(MAX_STOP)]), (v) => {
  if (typeof v === "string" || v === null || v === undefined) return null;
  if (!Array.isArray(v)) return { message: `stop must be a string or an array of at most ${MAX_STOP} strings` };
  if (v.length > MAX_STOP) return { message: `at most ${MAX_STOP} stop sequences are allowed, got ${v.length}` };
  const i = v.findIndex((s) => typeof s !== "string");
  return i < 0 ? null : { message: "stop sequences must be strings", path: [i] };
});

/** A list of choices (vLLM's `choice`): at least one string. */
const Choices = z.array(z.string(), { error: "must be an array of strings" }).min(1, { error: "must list at least one choice" });

/**
 * vLLM's `structured_outputs`: one constraint (`json`, `regex`, `choice`, `json_object`; `grammar` and
 * `structural_tag` are parsed to be refused by name) and how JSON may be spaced (output-grammar.ts).
 */
const StructuredOutputs = z.looseObject({
  json: z.unknown().optional(),
  regex: maybe(z.string()),
  choice: maybe(Choices),
  json_object: maybe(z.boolean()),
  grammar: maybe(z.string()),
  structural_tag: z.unknown().optional(),
  whitespace_pattern: maybe(z.string()),
  disable_any_whitespace: maybe(z.boolean()),
});

/** vLLM's `priority`: an integer, lower scheduled first (shared by every route that takes one). */
export const priorityField = maybe(z.number().int().min(-(2 ** 31)).max(2 ** 31 - 1));

/** vLLM's `truncate_prompt_tokens`: keep the prompt's last N tokens, -1 as many as the context holds. */
export const truncatePromptTokensField = maybe(explained(z.number().int().min(-1), (v) => (v === 0 ? { message: "must be -1 or a positive number of tokens to keep, got 0" } : null)));

/**
 * vLLM's `cache_salt`: the prompt's KV is shared in the prefix cache only with requests of the same
 * salt (GenerateRequest.cacheSalt). Should be secret and long enough not to be guessed (vLLM
 * suggests 256 random bits, 43 base64 characters).
 */
export const cacheSaltField = maybe(explained(z.string(), (v) => (v === "" ? { message: "must be a non-empty string if provided" } : null)));

/** OpenAI's `service_tier` values. */
export const SERVICE_TIERS = ["auto", "default", "flex", "scale", "priority"] as const;

/** Fields shared by chat and completions. */
const common = {
  model: z.string().min(1),
  stream: maybe(z.boolean()),
  // continuous_usage_stats (vLLM's): with include_usage, every chunk carries the usage so far.
  stream_options: maybe(z.looseObject({ include_usage: maybe(z.boolean()), continuous_usage_stats: maybe(z.boolean()) })),
  max_tokens: maybe(positiveInt),
  temperature: maybe(z.number().min(0).max(2)),
  top_p: maybe(z.number().gt(0).max(1)),
  top_k: maybe(z.number().int().min(-1)),
  // vLLM's extension: tokens less likely than min_p × the most likely are not sampled.
  min_p: maybe(z.number().min(0).max(1)),
  // vLLM's extension: lower is scheduled first (admitted before, preempted after); 0 by default.
  priority: priorityField,
  // vLLM's extension: keep only the prompt's last this-many tokens (-1: as many as the context holds).
  truncate_prompt_tokens: truncatePromptTokensField,
  // vLLM's extension: prefix-cache isolation between tenants.
  cache_salt: cacheSaltField,
  // OpenAI's processing tiers, read as priorities (openai.ts `tierPriority`).
  service_tier: maybe(z.enum(SERVICE_TIERS)),
  // vLLM's extension (HF's): logits of tokens in the prompt or output divided (if positive) or multiplied by it.
  repetition_penalty: maybe(z.number().gt(0).max(1e6)),
  seed: maybe(z.number().int().min(-(2 ** 53)).max(2 ** 53)),
  stop: maybe(Stop),
  n: maybe(z.number().int()),
  user: maybe(sessionKey),
  prompt_cache_key: maybe(sessionKey),
  ignore_eos: maybe(z.boolean()),
  // vLLM's extensions: more tokens that end the answer as EOS does, and no end before min_tokens.
  stop_token_ids: maybe(z.array(z.number().int().min(0)).max(256)),
  min_tokens: maybe(z.number().int().min(0)),
  /** The stop string that ended the answer stays in its text (vLLM's). */
  include_stop_str_in_output: maybe(z.boolean()),
  // vLLM's extensions: only these token ids may be sampled; these words are never written.
  allowed_token_ids: maybe(z.array(z.number().int().min(0)).min(1).max(1 << 20)),
  bad_words: maybe(z.array(z.string().min(1)).max(256)),
  // vLLM's extension: false writes control tokens the model emits as their vocabulary strings.
  skip_special_tokens: maybe(z.boolean()),
  response_format: maybe(z.looseObject({ type: z.string() })),
  structured_outputs: maybe(StructuredOutputs),
  // vLLM's older names for structured_outputs' json, regex, choice and grammar (removed in its 0.12).
  guided_json: z.unknown().optional(),
  guided_regex: maybe(z.string()),
  guided_choice: maybe(Choices),
  guided_grammar: maybe(z.string()),
  guided_whitespace_pattern: maybe(z.string()),
  // vLLM's extension: each prompt token's log probability, rank and this many alternatives.
  prompt_logprobs: maybe(z.number().int().min(0).max(20)),
  // Parsed so that a bad value gets a 400 naming it; openai.ts refuses any but the no-op value.
  presence_penalty: maybe(z.number().min(-2).max(2)),
  frequency_penalty: maybe(z.number().min(-2).max(2)),
  logit_bias: maybe(explained(z.record(z.string(), z.number().min(-100).max(100)), (v) => {
    const key = isObject(v) ? Object.keys(v).find((k) => !/^\d+$/.test(k)) : undefined;
    return key === undefined ? null : { message: `keys must be token ids, got the key ${JSON.stringify(key)}`, path: [key] };
  })),
};

/** A function the model may call (OpenAI's `tools[]` entry). */
export const ToolSchema = z.looseObject({
  type: z.literal("function"),
  function: z.looseObject({
    // OpenAI's rule for function names; the name is what the model writes back, so it must be plain.
    name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "must be 1-64 letters, digits, underscores or dashes"),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
  }),
});

/** The chat template variables the server sets from the request and the model (chat-template.ts). */
export const RESERVED_TEMPLATE_VARIABLES = ["messages", "tools", "add_generation_prompt", "bos_token", "eos_token"] as const;

/** POST /v1/chat/completions */
export const ChatRequestSchema = z.looseObject({
  ...common,
  messages: z.array(ChatMessageSchema).min(1),
  tools: maybe(z.array(ToolSchema).max(128)),
  tool_choice: maybe(explained(
    z.union([
      z.enum(["none", "auto", "required"]),
      z.looseObject({ type: z.literal("function"), function: z.looseObject({ name: z.string() }) }),
      // OpenAI's allowed_tools: every tool stays in the prompt (its cached prefix unchanged); only these may be called.
      z.looseObject({
        type: z.literal("allowed_tools"),
        allowed_tools: z.looseObject({
          mode: z.enum(["auto", "required"]),
          tools: z.array(z.looseObject({ type: z.literal("function"), function: z.looseObject({ name: z.string() }) })).min(1),
        }),
      }),
    ]),
    (v) => {
      if (v === "none" || v === "auto" || v === "required" || v === null || v === undefined) return null;
      if (isObject(v) && v.type === "function" && isObject(v.function) && typeof v.function.name === "string") return null;
      if (isObject(v) && v.type === "allowed_tools") {
        const a = v.allowed_tools;
        if (!isObject(a) || (a.mode !== "auto" && a.mode !== "required")) return { message: 'allowed_tools needs a mode of "auto" or "required"', path: ["allowed_tools", "mode"] };
        const ok = Array.isArray(a.tools) && a.tools.length > 0 && a.tools.every((t) => isObject(t) && t.type === "function" && isObject(t.function) && typeof t.function.name === "string");
        return ok ? null : { message: 'allowed_tools.tools must list at least one {"type": "function", "function": {"name": "..."}}', path: ["allowed_tools", "tools"] };
      }
      return { message: 'tool_choice must be "none", "auto", "required", {"type": "function", "function": {"name": "..."}} or {"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}' };
    },
  )),
  parallel_tool_calls: maybe(z.boolean()),
  // vLLM's and SGLang's extension: more variables for the chat template (`enable_thinking: false`
  // for Qwen3 and GLM-4.5). The server's own variables stay its own.
  chat_template_kwargs: maybe(explained(z.record(z.string(), z.unknown()), (v) => {
    const key = isObject(v) ? Object.keys(v).find((k) => (RESERVED_TEMPLATE_VARIABLES as readonly string[]).includes(k)) : undefined;
    return key === undefined ? null : { message: `may not set ${JSON.stringify(key)}, which the server passes to the template itself`, path: [key] };
  })),
  max_completion_tokens: maybe(positiveInt),
  // vLLM's extensions: end the prompt without the assistant's generation prompt, or inside the final
  // (assistant) message, which the answer continues (a prefilled answer).
  add_generation_prompt: maybe(z.boolean()),
  continue_final_message: maybe(z.boolean()),
  // vLLM's extension: at most this many reasoning tokens, then the reasoning's end is forced (reasoning-budget.ts).
  thinking_token_budget: maybe(z.number().int().min(0)),
  // OpenAI's values (vLLM's too); templates read it as the levels they know (reasoning-effort.ts).
  reasoning_effort: maybe(z.enum(REASONING_EFFORTS, {
    error: (iss) => `must be one of ${REASONING_EFFORTS.map((e) => JSON.stringify(e)).join(", ")}, got ${JSON.stringify(iss.input)}`,
  })),
  logprobs: maybe(z.boolean()),
  top_logprobs: maybe(z.number().int().min(0).max(20)),
});

/** The most prompts one completion request may batch (OpenAI accepts arrays of prompts; vLLM too). */
export const MAX_PROMPTS = 128;

/** Completion prompts: text, token ids, or an array of either (one choice set per prompt). */
const Prompt = explained(
  z.union([z.string(), z.array(z.string()).min(1).max(MAX_PROMPTS), z.array(z.number().int().min(0)).min(1), z.array(z.array(z.number().int().min(0)).min(1)).min(1).max(MAX_PROMPTS)]),
  (v): Flaw | null => {
    const what = "prompt must be a string, an array of token ids, or an array of strings or of token id arrays";
    if (v === undefined) return { message: "a prompt is required" };
    if (typeof v === "string") return null;
    if (!Array.isArray(v)) return { message: what };
    if (v.length === 0) return { message: "the prompt array is empty" };
    const ids = (a: unknown[], at: (string | number)[]): Flaw | null => {
      if (a.length === 0) return { message: "the prompt's token id array is empty", path: at };
      const i = a.findIndex((id) => !isTokenId(id));
      return i < 0 ? null : { message: "token ids must be non-negative integers", path: [...at, i] };
    };
    if (typeof v[0] === "string" || Array.isArray(v[0])) {
      if (v.length > MAX_PROMPTS) return { message: `at most ${MAX_PROMPTS} prompts per request are supported, got ${v.length}` };
      for (let i = 0; i < v.length; i++) {
        const p = v[i];
        if (typeof v[0] === "string" ? typeof p !== "string" : !Array.isArray(p)) return { message: `${what}; the prompts must all be of one kind`, path: [i] };
        const f = typeof p === "string" ? null : ids(p as unknown[], [i]);
        if (f) return f;
      }
      return null;
    }
    return ids(v, []);
  },
);

/** POST /v1/completions: one prompt as text or token ids. */
export const CompletionRequestSchema = z.looseObject({
  ...common,
  prompt: Prompt,
  // 0 only with echo: the prompt is scored, nothing generated (checked in openai.ts).
  max_tokens: maybe(z.number().int().min(0)),
  // OpenAI allows 5; vLLM 20, as here.
  logprobs: maybe(z.number().int().min(0).max(20)),
  echo: maybe(z.boolean()),
  best_of: maybe(z.number().int().min(1)),
  suffix: maybe(z.string()),
});

/** A parsed chat request. */
export type ChatRequest = z.infer<typeof ChatRequestSchema>;
/** A parsed completion request. */
export type CompletionRequest = z.infer<typeof CompletionRequestSchema>;
/** A parsed tool definition. */
export type ToolDef = z.infer<typeof ToolSchema>;
/** A parsed chat message. */
export type ChatMessageIn = z.infer<typeof ChatMessageSchema>;
