/**
 * The table docs-params-hunt5.test.ts runs: its rows' shape, request builders and checks, and the
 * refusals docs/serving.md promises for /v1/chat/completions and /v1/completions (each a 400 or 404
 * naming the field) and the parameters checked only as accepted, one row each.
 */
import assert from "node:assert/strict";

/** The served model's name. */
export const MODEL = "stories260K";
/** The prompt most rows continue. */
export const PROMPT = "Once upon a time";
/** stories260K's greedy continuation of PROMPT (openai-client.test.ts checks it too). */
export const GREEDY = ", there was a little girl named Lily. She loved to play outsid";
/** stories260K's EOS and BOS ids. */
export const EOS = 2;
export const BOS = 1;
/** The id of " little", the fifth token of GREEDY. */
export const LITTLE = 376;

/** A JSON object, read loosely. */
export type Json = Record<string, unknown>;
/** A server's answer: status, parsed body (empty for a stream), headers and raw text. */
export interface Reply { status: number; body: Json; headers: Headers; text: string }
/** Posts a body to a path under /v1. */
export type Post = (path: string, body: Json) => Promise<Reply>;

/** One documented behaviour: a request and what the docs say comes back. */
export interface Row {
  name: string;
  path: "chat" | "completions";
  body: Json;
  check: (r: Reply, post: Post) => void | Promise<void>;
}

/** A chat request of one user message. */
export const chat = (content: string, more: Json = {}): Json => ({ model: MODEL, messages: [{ role: "user", content }], ...more });
/** A greedy completion request of PROMPT. */
export const comp = (more: Json = {}): Json => ({ model: MODEL, prompt: PROMPT, temperature: 0, ...more });
/** The choices of a reply, typed loosely. */
export const choices = (r: Reply) => r.body.choices as Json[];
/** The usage of a reply. */
export const usage = (r: Reply) => r.body.usage as Record<string, number>;
/** Asserts a 200. */
export const ok = (r: Reply) => assert.equal(r.status, 200, r.text);

/** A 400 naming `param` with `code`, in OpenAI's error shape. */
export const refused = (param: string, code?: string) => (r: Reply) => {
  assert.equal(r.status, 400, r.text);
  const e = r.body.error as Json;
  assert.equal(typeof e.message, "string");
  assert.equal(e.type, "invalid_request_error", r.text);
  assert.equal(e.param, param, r.text);
  if (code) assert.equal(e.code, code, r.text);
};

/** Parses an SSE body into its JSON events (without `[DONE]`). */
export function events(text: string): Json[] {
  const lines = text.split("\n").filter((l) => l.startsWith("data: ") && l !== "data: [DONE]");
  return lines.map((l) => JSON.parse(l.slice(6)) as Json);
}

/** The documented refusals: each request is answered with the status and `param` the docs name. */
export const refusalRows: Row[] = [
  { name: "prompt_logprobs above 20 is a 400", path: "completions", body: comp({ prompt_logprobs: 21 }), check: refused("prompt_logprobs") },
  { name: "max_tokens given past what the context leaves is a 400 naming it", path: "completions", body: comp({ prompt: Array(2040).fill(403), max_tokens: 16 }), check: (r) => {
    assert.equal(r.status, 400, r.text);
    assert.deepEqual([(r.body.error as Json).param, (r.body.error as Json).code], ["max_tokens", "context_length_exceeded"]);
  } },
  { name: "tools on a model without a chat template are a 400", path: "chat", body: chat(PROMPT, { tools: [{ type: "function", function: { name: "f" } }] }), check: refused("tools", "unsupported_parameter") },
  { name: "structured_outputs beside response_format is a 400", path: "chat", body: chat(PROMPT, { structured_outputs: { choice: ["a"] }, response_format: { type: "json_object" } }), check: (r) => assert.equal(r.status, 400, r.text) },
  { name: "a whitespace pattern is refused as unsupported", path: "chat", body: chat(PROMPT, { structured_outputs: { json: { type: "object" }, whitespace_pattern: " *" } }), check: (r) => {
    assert.equal(r.status, 400, r.text);
    assert.equal((r.body.error as Json).code, "unsupported_parameter");
  } },
  { name: "a text that cannot fit is refused untokenized: at least N tokens", path: "completions", body: comp({ prompt: "x".repeat(300_000), max_tokens: 1 }), check: (r) => {
    refused("prompt", "context_length_exceeded")(r);
    assert.match((r.body.error as Json).message as string, /at least \d+ tokens/);
  } },
  { name: "65 stop strings are a 400", path: "completions", body: comp({ max_tokens: 4, stop: Array.from({ length: 65 }, (_, i) => `zz${i}`) }), check: refused("stop") },
  { name: "n above 16 is a 400", path: "chat", body: chat(PROMPT, { n: 17 }), check: refused("n", "invalid_value") },
  { name: "top_logprobs without logprobs is a 400", path: "chat", body: chat(PROMPT, { top_logprobs: 2 }), check: refused("top_logprobs") },
  { name: "top_logprobs above 20 is a 400", path: "chat", body: chat(PROMPT, { logprobs: true, top_logprobs: 21 }), check: refused("top_logprobs") },
  { name: "completions logprobs above 20 is a 400", path: "completions", body: comp({ logprobs: 21 }), check: refused("logprobs") },
  { name: "stop_token_ids outside the vocabulary are a 400", path: "completions", body: comp({ stop_token_ids: [999999] }), check: refused("stop_token_ids") },
  { name: "max_tokens beyond the context is context_length_exceeded naming it", path: "completions", body: comp({ max_tokens: 100_000 }), check: refused("max_tokens", "context_length_exceeded") },
  { name: "a refused prompt of several is named prompt[p]", path: "completions", body: comp({ prompt: [PROMPT, "hi ".repeat(3000)], max_tokens: 1 }), check: refused("prompt[1]", "context_length_exceeded") },
  { name: "more than 256 generations per request is a 400", path: "completions", body: comp({ prompt: Array.from({ length: 128 }, () => PROMPT), n: 3, max_tokens: 1 }), check: (r) => assert.equal(r.status, 400, r.text) },
  { name: "bad_words over 16384 characters are a 400", path: "completions", body: comp({ bad_words: ["x".repeat(16_385)] }), check: refused("bad_words") },
  { name: "stream_options without stream is a 400", path: "chat", body: chat(PROMPT, { stream_options: { include_usage: true } }), check: refused("stream_options") },
  { name: "prompt_logprobs with stream is a 400", path: "completions", body: comp({ prompt_logprobs: 1, stream: true }), check: refused("prompt_logprobs") },
  { name: "a prompt over the context is context_length_exceeded", path: "completions", body: comp({ prompt: "hi ".repeat(3000), max_tokens: 1 }), check: refused("prompt", "context_length_exceeded") },
  { name: "truncate_prompt_tokens above the context is a 400", path: "chat", body: chat(PROMPT, { truncate_prompt_tokens: 100_000 }), check: refused("truncate_prompt_tokens") },
  { name: "user over 512 characters is a 400", path: "chat", body: chat(PROMPT, { user: "u".repeat(513) }), check: refused("user") },
  { name: "max_tokens 0 without echo is a 400", path: "completions", body: comp({ max_tokens: 0 }), check: refused("max_tokens") },
  { name: "continue_final_message after a user message is a 400", path: "chat", body: chat(PROMPT, { continue_final_message: true, add_generation_prompt: false }), check: (r) => assert.equal(r.status, 400, r.text) },
  { name: "best_of below n is a 400", path: "completions", body: comp({ best_of: 1, n: 2 }), check: refused("best_of") },
  { name: "best_of with stream is a 400 unless equal to n", path: "completions", body: comp({ best_of: 2, stream: true }), check: refused("best_of") },
  { name: "logit_bias outside the vocabulary is a 400", path: "completions", body: comp({ logit_bias: { "999999": 1 } }), check: refused("logit_bias") },
  { name: "presence_penalty outside -2..2 is a 400", path: "chat", body: chat(PROMPT, { presence_penalty: 2.5 }), check: refused("presence_penalty") },
  { name: "another reasoning_effort is a 400", path: "chat", body: chat(PROMPT, { reasoning_effort: "huge" }), check: refused("reasoning_effort", "invalid_value") },
  { name: "another service_tier is a 400", path: "completions", body: comp({ service_tier: "gold" }), check: refused("service_tier") },
  { name: "cache_salt empty is a 400", path: "chat", body: chat(PROMPT, { cache_salt: "" }), check: refused("cache_salt") },
  { name: "another response_format type is a 400", path: "chat", body: chat(PROMPT, { response_format: { type: "yaml" } }), check: refused("response_format") },
  { name: "continue_final_message with add_generation_prompt true is a 400", path: "chat", body: { model: MODEL, messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Once" }], continue_final_message: true, add_generation_prompt: true }, check: refused("continue_final_message") },
  { name: "prompts of two kinds are a 400 naming the odd one", path: "completions", body: comp({ prompt: ["a", [261]] }), check: refused("prompt[1]") },
  { name: "prompt_cache_key over 512 characters is a 400", path: "chat", body: chat(PROMPT, { prompt_cache_key: "k".repeat(513) }), check: refused("prompt_cache_key") },
  { name: "a logit_bias above 100 is a 400", path: "completions", body: comp({ logit_bias: { "5": 101 } }), check: (r) => assert.equal(r.status, 400, r.text) },
  { name: "an image part is a 400 without a vision projector", path: "chat", body: { model: MODEL, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }, check: refused("messages") },
  { name: "a message without content is a 400", path: "chat", body: { model: MODEL, messages: [{ role: "user" }] }, check: refused("messages[0].content") },
  { name: "chat_template_kwargs may not set the server's variables", path: "chat", body: chat(PROMPT, { chat_template_kwargs: { messages: [] } }), check: refused("chat_template_kwargs.messages") },
  { name: "thinking_token_budget without a reasoning parser is a 400", path: "chat", body: chat(PROMPT, { thinking_token_budget: 5 }), check: refused("thinking_token_budget") },
  // Documented refusals: OpenAI's legacy and non-text parameters, vLLM's unimplemented fields, suffix.
  ...([
    ["chat", "functions", [{ name: "f", parameters: {} }]],
    ["chat", "function_call", { name: "f" }],
    ["chat", "audio", { voice: "alloy", format: "wav" }],
    ["chat", "modalities", ["text", "audio"]],
    ["chat", "web_search_options", {}],
    ["completions", "suffix", "The end."],
    ["completions", "use_beam_search", true],
    ["chat", "return_tokens_as_token_ids", true],
    ["completions", "logprob_token_ids", [5]],
    ["chat", "return_token_ids", true],
    ["completions", "return_token_ids", true],
  ] as const).map(([path, field, value]): Row => ({
    name: `${field} is refused as unsupported`, path, body: path === "chat" ? chat(PROMPT, { [field]: value }) : comp({ [field]: value }), check: refused(field, "unsupported_parameter"),
  })),
  ...([
    ["completions", "suffix", ""],
    ["completions", "use_beam_search", false],
    ["chat", "function_call", "auto"],
    ["chat", "modalities", ["text"]],
  ] as const).map(([path, field, value]): Row => ({
    name: `${field} with its no-op value is accepted`, path, body: path === "chat" ? chat(PROMPT, { [field]: value, max_tokens: 1 }) : comp({ [field]: value, max_tokens: 1 }), check: ok,
  })),
  // The error statuses listed at the end of docs/serving.md.
  { name: "a missing field is missing_required_parameter", path: "chat", body: { model: MODEL }, check: refused("messages", "missing_required_parameter") },
  { name: "a wrong type is invalid_value", path: "chat", body: chat(PROMPT, { max_tokens: "ten" }), check: refused("max_tokens", "invalid_value") },
  { name: "an unknown model is a 404", path: "chat", body: { ...chat(PROMPT), model: "gpt-9" }, check: (r) => assert.equal(r.status, 404, r.text) },
  { name: "unknown fields are ignored", path: "completions", body: comp({ max_tokens: 1, some_future_field: { a: 1 } }), check: ok },
];

/** Documented parameters whose check is that they are accepted (their effect needs a model that shows it). */
export const acceptedRows: Row[] = [
  { name: "up to 64 stop strings", path: "completions", body: comp({ max_tokens: 4, stop: Array.from({ length: 64 }, (_, i) => `zz${i}`) }), check: ok },
  { name: "best_of equal to n may stream", path: "completions", body: comp({ max_tokens: 2, n: 2, best_of: 2, stream: true }), check: ok },
  { name: "truncate_prompt_tokens -1 serves a prompt over the context", path: "completions", body: comp({ prompt: "hi ".repeat(3000), max_tokens: 1, truncate_prompt_tokens: -1 }), check: ok },
  { name: "priority is accepted under priority scheduling", path: "chat", body: chat(PROMPT, { max_tokens: 2, priority: -3 }), check: ok },
  { name: "user and prompt_cache_key up to 512 characters", path: "chat", body: chat(PROMPT, { max_tokens: 2, user: "u".repeat(512), prompt_cache_key: "k" }), check: ok },
  { name: "sampling knobs are accepted", path: "chat", body: chat(PROMPT, { max_tokens: 3, top_p: 0.9, top_k: 5, min_p: 0.05, repetition_penalty: 1.2, frequency_penalty: 0.5, presence_penalty: 0.5, parallel_tool_calls: false }), check: ok },
  { name: "reasoning_effort takes OpenAI's levels", path: "chat", body: chat(PROMPT, { max_tokens: 1, reasoning_effort: "minimal" }), check: ok },
  { name: "response_format text constrains nothing", path: "chat", body: chat(PROMPT, { max_tokens: 1, response_format: { type: "text" } }), check: ok },
  { name: "an empty stream_options passes without stream", path: "chat", body: chat(PROMPT, { max_tokens: 1, stream_options: {} }), check: ok },
  { name: "an assistant message with tool_calls needs no content", path: "chat", body: { model: MODEL, max_tokens: 1, messages: [{ role: "user", content: "Hi" }, { role: "assistant", tool_calls: [{ id: "a", type: "function", function: { name: "f", arguments: "{}" } }] }, { role: "tool", tool_call_id: "a", content: "ok" }] }, check: ok },
  { name: "content as text parts", path: "chat", body: { model: MODEL, messages: [{ role: "user", content: [{ type: "text", text: PROMPT }] }], max_tokens: 2 }, check: ok },
];

/** `max_tokens` and `truncate_prompt_tokens` against the context (2048 tokens). */
export const limitRows: Row[] = [
  { name: "max_tokens left out is 16 on completions", path: "completions", body: comp(), check: (r) => {
    ok(r);
    assert.equal(usage(r).completion_tokens, 16);
  } },
  { name: "max_tokens left out stays within what the context leaves", path: "completions", body: comp({ prompt: Array(2040).fill(403) }), check: (r) => {
    ok(r);
    assert.deepEqual([usage(r).completion_tokens, choices(r)[0].finish_reason], [8, "length"]);
  } },
  { name: "truncate_prompt_tokens keeps the last N", path: "completions", body: comp({ max_tokens: 1, truncate_prompt_tokens: 3 }), check: (r) => {
    ok(r);
    assert.equal(usage(r).prompt_tokens, 3);
  } },
  { name: "truncate_prompt_tokens with echo returns the kept tail", path: "completions", body: comp({ max_tokens: 1, truncate_prompt_tokens: 2, echo: true }), check: (r) => {
    ok(r);
    assert.ok((choices(r)[0].text as string).trimStart().startsWith("a time"), r.text);
  } },
  { name: "max_completion_tokens on chat", path: "chat", body: chat(PROMPT, { max_completion_tokens: 5, temperature: 0 }), check: (r) => {
    ok(r);
    assert.equal(usage(r).completion_tokens, 5);
    assert.equal(choices(r)[0].finish_reason, "length");
  } },
];
