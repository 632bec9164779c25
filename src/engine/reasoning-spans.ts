/**
 * Which generated positions of a sequence are reasoning: every token from a `<think>` token through
 * its `</think>` token (both tags included), tracked as the sequence grows. The KV adapter types a
 * committed block holding any of them "reasoning" (scheduler-kv-adapter.ts), and kv/agent-retention.ts
 * evicts such blocks first once their turn has ended: agents' chat templates drop earlier turns'
 * reasoning from the next prompt, and a block's hash covers all its tokens, so no later prompt
 * matches it.
 *
 * Only tags that are one token each are tracked (Qwen3, QwQ and DeepSeek-R1 have `<think>` and
 * `</think>` as single added tokens): a tag spelled over several tokens would need a token-sequence
 * matcher across steps, and a vocabulary without them as tokens belongs to a model not trained to
 * reason in them. Such a model's blocks stay typed "output"; the server still parses its reasoning
 * from the text (src/serve/reasoning.ts).
 *
 * The rules match the text parser's: a start tag opens reasoning only outside it, an end tag closes
 * it only inside it, and an output can hold several reasoning spans (interleaved thinking).
 *
 * Harmony (gpt-oss) has no reasoning tags but a channel: an analysis message,
 * `<|channel|>analysis<|message|>…<|end|>`, is reasoning from its `<|channel|>` through its end. Its
 * header is matched token by token (the control tokens, then the channel name's few tokens), so its
 * span is known once `<|message|>` comes; a block committed while only the header's first tokens
 * had come stays "output", which costs at most one block's typing. A header naming a recipient
 * before `<|message|>` (a built-in tool's call in the analysis channel) is not matched.
 */

/**
 * Token ids that open and close reasoning: the vocabulary's `<think>` and `</think>`; for harmony,
 * `<|channel|>` and `<|end|>`, with the rest of its header in `harmony`.
 */
export interface ReasoningTokens {
  readonly start: number;
  readonly end: number;
  /** Harmony's analysis header and its other message ends; absent for tag formats. */
  readonly harmony?: HarmonyReasoningTokens;
}

/** What else harmony's token-level tracking needs (ReasoningTokens `start` is `<|channel|>`, `end` is `<|end|>`). */
export interface HarmonyReasoningTokens {
  /** The channel name `analysis` as the tokenizer encodes it after `<|channel|>`. */
  readonly analysis: readonly number[];
  /** `<|message|>`, which ends a header. */
  readonly message: number;
  /** Tokens that also end a message: `<|call|>`, `<|return|>`, and `<|start|>` (a message begun without its end). */
  readonly alsoEnd: readonly number[];
}

/** What the KV layer asks of a sequence's reasoning (read only). */
export interface ReasoningPositions {
  /** True when any position in `[from, to)` holds a reasoning token. */
  overlaps(from: number, to: number): boolean;
}

/** The reasoning spans of one sequence's generated tokens. */
export class ReasoningSpans implements ReasoningPositions {
  /** Span bounds in pairs, [from, to) each, in position order; the last `to` is Infinity while open. */
  private readonly bounds: number[] = [];
  /** Harmony: where the `<|channel|>` of a header being matched stands, and how many of its tokens matched. */
  private header: { at: number; matched: number } | null = null;
  /** The first span was opened by the prompt (it has no opening tag or header among the outputs). */
  private promptOpened = false;

  /**
   * `openAt`: the prompt's length when the prompt itself left a `<think>` block open (DeepSeek-R1's
   * template ends with it), or a harmony analysis message, so the first generated token is already reasoning.
   */
  constructor(private readonly tags: ReasoningTokens, openAt?: number) {
    if (tags.start === tags.end) throw new RangeError(`Reasoning start and end must be different tokens, got ${tags.start} for both`);
    if (openAt !== undefined) {
      this.bounds.push(openAt, Infinity);
      this.promptOpened = true;
    }
  }

  /** An independent copy, to follow hypothetical tokens (a speculative draft) without moving this one. */
  clone(): ReasoningSpans {
    const c = new ReasoningSpans(this.tags);
    c.bounds.push(...this.bounds);
    c.header = this.header && { ...this.header };
    c.promptOpened = this.promptOpened;
    return c;
  }

  /** The token that ends a span (`</think>`; harmony's `<|end|>`). */
  get endToken(): number {
    return this.tags.end;
  }

  /** Whether any reasoning span has opened. */
  get opened(): boolean {
    return this.bounds.length > 0;
  }

  /**
   * While outside reasoning, the token that would carry on opening a span at the next position:
   * `<think>`; for harmony, the next token of an analysis header under way after its `<|channel|>`
   * (undefined: none is under way, or inside reasoning).
   */
  get nextOpener(): number | undefined {
    if (this.inside) return undefined;
    const h = this.tags.harmony;
    if (h === undefined) return this.tags.start;
    const m = this.header;
    if (m === null) return undefined;
    return m.matched < h.analysis.length ? h.analysis[m.matched] : h.message;
  }

  /** True while the sequence is inside reasoning (the next token generated is reasoning). */
  get inside(): boolean {
    return this.bounds.length > 0 && this.bounds[this.bounds.length - 1] === Infinity;
  }

  /** Token `token` was generated at position `pos` (positions only grow). */
  push(token: number, pos: number): void {
    const h = this.tags.harmony;
    if (this.inside) {
      if (token === this.tags.end || (h !== undefined && h.alsoEnd.includes(token))) this.bounds[this.bounds.length - 1] = pos + 1;
    } else if (h === undefined) {
      if (token === this.tags.start) this.bounds.push(pos, Infinity);
    } else {
      this.matchHeader(h, token, pos);
    }
  }

  /** Harmony: `<|channel|>`, then the analysis name's tokens, then `<|message|>` opens a span at the `<|channel|>`. */
  private matchHeader(h: HarmonyReasoningTokens, token: number, pos: number): void {
    const m = this.header;
    this.header = null;
    if (token === this.tags.start) this.header = { at: pos, matched: 0 };
    else if (m !== null && m.matched < h.analysis.length && token === h.analysis[m.matched]) this.header = { at: m.at, matched: m.matched + 1 };
    else if (m !== null && m.matched === h.analysis.length && token === h.message) this.bounds.push(m.at, Infinity);
  }

  overlaps(from: number, to: number): boolean {
    // Latest span first: blocks are committed near the end of the sequence.
    for (let i = this.bounds.length - 2; i >= 0; i -= 2) {
      if (this.bounds[i + 1] <= from) return false;
      if (this.bounds[i] < to) return true;
    }
    return false;
  }

  /**
   * Reasoning content among positions below `end`: each span's tokens less its opening tag (harmony:
   * its header, `<|channel|>analysis<|message|>`) and its end token; a span the prompt opened has no
   * opening among them. What a reasoning budget counts (reasoning-budget.ts).
   */
  thought(end: number): number {
    const opening = this.tags.harmony ? 2 + this.tags.harmony.analysis.length : 1;
    let n = 0;
    for (let i = 0; i < this.bounds.length && this.bounds[i] < end; i += 2) {
      const from = this.bounds[i], to = this.bounds[i + 1];
      n += Math.max(0, Math.min(to, end) - from - (i === 0 && this.promptOpened ? 0 : opening) - (to <= end ? 1 : 0));
    }
    return n;
  }

  /** Reasoning tokens among positions below `end` (the sequence's length), tags included. */
  count(end: number): number {
    let n = 0;
    for (let i = 0; i < this.bounds.length; i += 2) n += Math.max(0, Math.min(this.bounds[i + 1], end) - this.bounds[i]);
    return n;
  }
}
