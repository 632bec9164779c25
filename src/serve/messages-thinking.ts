/**
 * Thinking on the Messages API: the signature a thinking block carries, what a block sent back
 * gives the prompt, and Anthropic's limits on `thinking.budget_tokens`.
 *
 * Anthropic signs each thinking block (an opaque value its clients send back unchanged), streamed as
 * a `signature_delta` just before the block's `content_block_stop`, and with `thinking.display:
 * "omitted"` returns the block with an empty `thinking` whose signature still carries the reasoning
 * for the next turn. This server keeps no keys and checks nothing: its signature is not a seal but
 * a plain record, `sha256:` and the SHA-256 of the shown text (a checksum), or, when the text is
 * omitted, `text:` and the text in base64, from which a block sent back with an empty `thinking`
 * gets its reasoning back. Any other signature (another server's, an empty one) is taken as it is
 * and never a 400.
 */
import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import { ApiError, describe } from "./errors.ts";
import type { MessagesPrompt } from "./messages-schema.ts";

/** What starts a signature that carries an omitted block's text (base64 after it). */
const TEXT_SIGNATURE = "text:";
/** What starts a shown block's signature (the SHA-256 of its text, in hex, after it). */
const HASH_SIGNATURE = "sha256:";

/** A thinking block's signature: its text's checksum, or, when the text is not shown (`omitted`), the text itself. */
export function thinkingSignature(text: string, omitted: boolean): string {
  if (omitted) return TEXT_SIGNATURE + Buffer.from(text, "utf8").toString("base64");
  return HASH_SIGNATURE + createHash("sha256").update(text, "utf8").digest("hex");
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const UTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * The reasoning a thinking block sent back gives the prompt: its `thinking`, or, when that is empty
 * (a block returned with `display: "omitted"`), the text its signature carries; "" when neither
 * holds any (a signature that is not this server's, or is malformed, is ignored).
 */
export function thinkingOf(block: { thinking?: string; signature?: unknown }): string {
  if (block.thinking) return block.thinking;
  const sig = block.signature;
  if (typeof sig !== "string" || !sig.startsWith(TEXT_SIGNATURE)) return "";
  const b64 = sig.slice(TEXT_SIGNATURE.length);
  if (b64.length % 4 !== 0 || !BASE64.test(b64)) return "";
  try {
    return UTF8.decode(Buffer.from(b64, "base64"));
  } catch {
    return "";
  }
}

/** Whether the request asks for its thinking not to be shown (`thinking.display: "omitted"`). */
export function omitsThinking(body: Pick<MessagesPrompt, "thinking">): boolean {
  return body.thinking?.type !== "disabled" && body.thinking?.display === "omitted";
}

/** The least `thinking.budget_tokens` Anthropic's API takes. */
const MIN_THINKING_BUDGET = 1024;

/**
 * Anthropic's limits on `thinking: {"type": "enabled", "budget_tokens"}`: at least 1024 tokens, and
 * fewer than `max_tokens` (the thinking counts against it) unless the request carries the
 * `interleaved-thinking-*` beta (`interleaved`), under which Anthropic lets the budget pass it (the
 * budget then spans a whole assistant turn's thinking, as Claude Code sends it); each broken a 400
 * naming `thinking.budget_tokens` and the value, as Anthropic answers; "enabled" without a budget is a
 * 400 too (Anthropic requires one there). (`count_tokens` has no `max_tokens`.)
 */
export function checkThinkingBudget(body: MessagesPrompt & { max_tokens?: number }, interleaved = false): void {
  const thinking = body.thinking;
  if (thinking?.type !== "enabled") return;
  if (thinking.budget_tokens === undefined) {
    throw new ApiError(400, `thinking.budget_tokens is required with thinking ${describe(thinking)} (at least ${MIN_THINKING_BUDGET}; or {"type":"adaptive"})`, "thinking.budget_tokens", "missing_required_parameter");
  }
  const budget = thinking.budget_tokens;
  if (budget < MIN_THINKING_BUDGET) {
    throw new ApiError(400, `thinking.budget_tokens must be at least ${MIN_THINKING_BUDGET}, got ${budget}`, "thinking.budget_tokens", "invalid_value");
  }
  if (!interleaved && body.max_tokens !== undefined && body.max_tokens <= budget) {
    throw new ApiError(400, `max_tokens must be greater than thinking.budget_tokens (the thinking counts against max_tokens), got thinking.budget_tokens ${budget} with max_tokens ${body.max_tokens}`, "thinking.budget_tokens", "invalid_value");
  }
}
