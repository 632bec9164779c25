/**
 * Log probabilities in OpenAI's two wire forms: chat's `{content: [{token, logprob, bytes,
 * top_logprobs}]}` and completions' `{tokens, token_logprobs, top_logprobs, text_offset}`.
 */
import type { TokenLogprob } from "../engine/logprobs.ts";
import { type Tokenizer, tokenTextOf } from "../model/config.ts";

const enc = new TextEncoder();

/**
 * One chat `logprobs.content` entry. Its `bytes` are the token's own bytes where the tokenizer knows
 * them: a piece of a character (a byte-fallback token, part of an emoji) has text U+FFFD, whose
 * UTF-8 would lose which bytes it stands for, and OpenAI's `bytes` exist so that the pieces join.
 */
function chatEntry(tokenizer: Tokenizer, id: number, logprob: number) {
  const token = tokenTextOf(tokenizer, id);
  // A token whose own bytes are unknown or empty (a control token) keeps its text's bytes.
  const own = token.includes("\uFFFD") ? tokenizer.tokenBytes?.(id) : undefined;
  return { token, logprob, bytes: own !== undefined && own.length > 0 ? [...own] : [...enc.encode(token)] };
}

/** Chat's `logprobs` object for these tokens. */
export function chatLogprobs(tokenizer: Tokenizer, lps: readonly TokenLogprob[]) {
  return {
    content: lps.map((lp) => ({ ...chatEntry(tokenizer, lp.id, lp.logprob), top_logprobs: lp.top.map(([id, l]) => chatEntry(tokenizer, id, l)) })),
    refusal: null,
  };
}

/** Completions' `logprobs` object; an echoed prompt's first token has null log probabilities. */
export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
}

/**
 * Where each token's text starts in a text written token by token (completions' `text_offset`, in
 * UTF-16 code units as the text is). Counted over the tokens' bytes, so a character spread over
 * several tokens (byte-fallback pieces of an emoji) counts once, not once per piece: its pieces sit
 * where it starts (or, pieces of no character, at the text their predecessors completed), and the
 * tokens after it where their text is. Kept across a stream's chunks.
 */
export class TextOffsets {
  private readonly decoder = new TextDecoder();

  /** `at`: where the first token's text starts. */
  constructor(private readonly tokenizer: Tokenizer, private at = 0) {}

  /** Where the text of token `id` (written `text`) starts; moves past it. */
  next(id: number, text: string): number {
    const piece = text.includes("\uFFFD");
    const own = piece ? this.tokenizer.tokenBytes?.(id) : undefined;
    const out = this.decoder.decode(own !== undefined && own.length > 0 ? own : enc.encode(text), { stream: true });
    // A whole token's text ends what it completed (after the U+FFFDs of broken pieces before it).
    const start = piece ? this.at : this.at + Math.max(0, out.length - text.length);
    this.at += out.length;
    return start;
  }

  /** Where the text ends, an unfinished last character written as the U+FFFD a decoder writes; no token may follow. */
  close(): number {
    this.at += this.decoder.decode().length;
    return this.at;
  }
}

/**
 * Completions' `logprobs` object for these tokens; `offset` is the position of the first token's
 * text in the generated text (0), or a stream's offsets so far. Each step's
 * `top_logprobs` holds its alternatives and the token itself when they lack it (OpenAI's "up to
 * logprobs + 1 elements", as vLLM answers), so `logprobs` 0 still names the token. Alternatives
 * whose texts coincide keep the likelier one, as a JSON object cannot hold a key twice.
 */
export function completionLogprobs(tokenizer: Tokenizer, lps: readonly TokenLogprob[], offset: number | TextOffsets = 0): CompletionLogprobs {
  const tokens = lps.map((lp) => tokenTextOf(tokenizer, lp.id));
  const offsets = typeof offset === "number" ? new TextOffsets(tokenizer, offset) : offset;
  const textOffset = tokens.map((t, i) => offsets.next(lps[i].id, t));
  return {
    tokens,
    token_logprobs: lps.map((lp) => lp.logprob),
    top_logprobs: lps.map((lp) => {
      // No prototype: a token may read "__proto__" or "constructor".
      const top: Record<string, number> = Object.create(null);
      // The token itself, when not among them, is no likelier than any of them: it goes last.
      const own: [number, number][] = lp.top.some(([id]) => id === lp.id) ? [] : [[lp.id, lp.logprob]];
      for (const [id, l] of [...lp.top, ...own]) {
        const t = tokenTextOf(tokenizer, id);
        if (!Object.hasOwn(top, t)) top[t] = l;
      }
      return top;
    }),
    text_offset: textOffset,
  };
}

/** One token of vLLM's `prompt_logprobs`. */
export interface PromptTokenLogprob {
  logprob: number;
  /** 1 + how many tokens were likelier. */
  rank: number;
  decoded_token: string;
}

/**
 * vLLM's `prompt_logprobs`: per prompt token null for the first (nothing predicts it), else an object
 * keyed by token id holding the prompt token and the `top` likeliest tokens at its position.
 */
export function promptLogprobsJson(tokenizer: Tokenizer, lps: readonly (TokenLogprob | null)[], top: number): (Record<string, PromptTokenLogprob> | null)[] {
  return lps.map((lp) => {
    if (!lp) return null;
    const out: Record<string, PromptTokenLogprob> = { [lp.id]: { logprob: lp.logprob, rank: lp.rank, decoded_token: tokenTextOf(tokenizer, lp.id) } };
    const alternatives = lp.top.slice(0, top);
    for (const [id, logprob] of alternatives) {
      // Alternatives are ranked among themselves: every likelier token is one of them.
      out[id] ??= { logprob, rank: 1 + alternatives.filter(([, l]) => l > logprob).length, decoded_token: tokenTextOf(tokenizer, id) };
    }
    return out;
  });
}
