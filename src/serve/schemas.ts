/**
 * zod schemas of the OpenAI request bodies we accept. Unknown fields are ignored (as OpenAI does);
 * known fields are checked for type and range so a bad value gets a 400 that names it.
 */
import { z } from "zod";

const maybe = <T extends z.ZodType>(t: T) => t.nullable().optional();
const positiveInt = z.number().int().min(1);

/** A text part of a multi-part message content. */
const TextPart = z.object({ type: z.literal("text"), text: z.string() });

/** One chat message. */
export const ChatMessageSchema = z.looseObject({
  role: z.enum(["system", "developer", "user", "assistant", "tool"]),
  content: maybe(z.union([z.string(), z.array(TextPart)])),
  name: z.string().optional(),
});

/** Fields shared by chat and completions. */
const common = {
  model: z.string().min(1),
  stream: maybe(z.boolean()),
  stream_options: maybe(z.looseObject({ include_usage: maybe(z.boolean()) })),
  max_tokens: maybe(positiveInt),
  temperature: maybe(z.number().min(0).max(2)),
  top_p: maybe(z.number().gt(0).max(1)),
  top_k: maybe(z.number().int().min(-1)),
  seed: maybe(z.number().int().min(-(2 ** 53)).max(2 ** 53)),
  stop: maybe(z.union([z.string(), z.array(z.string()).max(4)])),
  n: maybe(z.number().int()),
  user: maybe(z.string()),
  prompt_cache_key: maybe(z.string()),
  ignore_eos: maybe(z.boolean()),
  presence_penalty: maybe(z.number().min(-2).max(2)),
  frequency_penalty: maybe(z.number().min(-2).max(2)),
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

/** POST /v1/chat/completions */
export const ChatRequestSchema = z.looseObject({
  ...common,
  messages: z.array(ChatMessageSchema).min(1),
  tools: maybe(z.array(ToolSchema).max(128)),
  tool_choice: maybe(z.union([
    z.enum(["none", "auto", "required"]),
    z.looseObject({ type: z.literal("function"), function: z.looseObject({ name: z.string() }) }),
  ])),
  parallel_tool_calls: maybe(z.boolean()),
  max_completion_tokens: maybe(positiveInt),
  logprobs: maybe(z.boolean()),
});

/** POST /v1/completions: one prompt as text or token ids. */
export const CompletionRequestSchema = z.looseObject({
  ...common,
  prompt: z.union([z.string(), z.array(z.string()).length(1), z.array(z.number().int().min(0)).min(1), z.array(z.array(z.number().int().min(0)).min(1)).length(1)]),
  logprobs: maybe(z.number().int()),
  echo: maybe(z.boolean()),
});

/** A parsed chat request. */
export type ChatRequest = z.infer<typeof ChatRequestSchema>;
/** A parsed completion request. */
export type CompletionRequest = z.infer<typeof CompletionRequestSchema>;
/** A parsed tool definition. */
export type ToolDef = z.infer<typeof ToolSchema>;
/** A parsed chat message. */
export type ChatMessageIn = z.infer<typeof ChatMessageSchema>;
