/**
 * Suffix decoding's drafts (vLLM's `"method": "suffix"`, after SuffixDecoding, Oliaro et al. 2024):
 * the continuation that most often followed the context's longest recurring suffix, in the request's
 * own context and in the outputs of earlier requests. Agents repeat themselves across requests (the
 * same tool calls, the same JSON, the same plan steps), which a draft copied only from the request's
 * own context (ngram-draft.ts) cannot see. Pure CPU code; the engine verifies every draft token.
 *
 * Instead of a suffix tree over every cached output, earlier outputs are indexed by their 2-grams;
 * a lookup extends each occurrence of the context's last two tokens backwards (up to `maxDepth`),
 * keeps the occurrences of the longest match, and walks their continuations: at each step the most
 * frequent next token, while its frequency along the path stays at least `minTokenProb`.
 */

/** How suffix drafts are proposed (vLLM's `--speculative-config` names in comments). */
export interface SuffixSpeculation {
  method: "suffix";
  /** Draft tokens per step at most (`num_speculative_tokens`; vLLM's default: `maxDepth`). */
  numTokens: number;
  /** Longest context suffix matched (`suffix_decoding_max_tree_depth`, default 24). */
  maxDepth: number;
  /** Earlier requests' outputs kept (`suffix_decoding_max_cached_requests`, default 10000; 0: own context only). */
  maxCachedRequests: number;
  /** A draft is at most this many times as long as the suffix it matched (`suffix_decoding_max_spec_factor`, default 1). */
  maxSpecFactor: number;
  /** A draft stops where its path's frequency falls below this (`suffix_decoding_min_token_prob`, default 0.1). */
  minTokenProb: number;
  /** No drafts while more than this many sequences run (`disable_by_batch_size`). */
  disableByBatchSize?: number;
}

/** Tokens matched before an occurrence counts (the index's key length). */
const KEY = 2;
/** Occurrences of one key kept (the newest): a frequent pair would otherwise make every lookup long. */
const MAX_OCCURRENCES = 256;
/** Own-context occurrences examined per lookup, newest first. */
const MAX_OWN = 64;

/** Where a match continues: `seq` (an earlier output, or the context itself) from position `at`. */
interface Occurrence {
  seq: readonly number[];
  at: number;
}

/** Positions kept per output: an occurrence is stored as one number, output id × AT_LIMIT + position. */
const AT_LIMIT = 2 ** 24;

/**
 * Output tokens kept in all by default, past which the oldest outputs go whatever `maxRequests` says.
 * A count alone does not bound memory: 10000 reasoning answers of 10k tokens are 100M tokens, each
 * 8 bytes in its output and 8 in the index (1.6 GB). 2^23 tokens stay near 130 MB and still hold
 * the default count (10000) of agent-sized answers (500 tokens), so only long outputs meet it.
 */
export const DEFAULT_MAX_CACHED_TOKENS = 2 ** 23;

/**
 * Earlier requests' outputs, indexed by 2-gram, the oldest dropped past `maxRequests` outputs or
 * `maxTokens` tokens. An occurrence is one number (no object per token), so 10000 outputs of 500
 * tokens cost about 40 MB of index.
 */
export class SuffixCache {
  private readonly outputs = new Map<number, readonly number[]>();
  private readonly index = new Map<number, number[]>();
  private nextId = 0;
  private tokens = 0;

  constructor(private readonly maxRequests: number, private readonly maxTokens = DEFAULT_MAX_CACHED_TOKENS) {}

  /** Outputs kept. */
  get size(): number {
    return this.outputs.size;
  }

  /** Tokens of the outputs kept. */
  get tokenCount(): number {
    return this.tokens;
  }

  /** Keeps a finished request's output (too short to hold a key and a next token: not kept). */
  add(output: readonly number[]): void {
    if (this.maxRequests === 0 || output.length <= KEY) return;
    const seq = output.slice(0, Math.min(AT_LIMIT, this.maxTokens));
    const id = this.nextId++;
    this.outputs.set(id, seq);
    this.tokens += seq.length;
    for (let at = KEY; at < seq.length; at++) {
      const key = keyAt(seq, at);
      let list = this.index.get(key);
      if (list === undefined) this.index.set(key, (list = []));
      list.push(id * AT_LIMIT + at);
      if (list.length > MAX_OCCURRENCES) list.shift();
    }
    while (this.outputs.size > this.maxRequests || this.tokens > this.maxTokens) {
      const [oldest] = this.outputs.keys();
      this.drop(oldest);
    }
  }

  /**
   * Up to `limit` draft tokens after `context` (a request's prompt and output so far), from its own
   * earlier tokens and (`shared`, the default) the cached outputs. Empty when the context's last two
   * tokens never occurred.
   */
  draft(context: readonly number[], s: Pick<SuffixSpeculation, "maxDepth" | "maxSpecFactor" | "minTokenProb">, limit: number, shared = true): number[] {
    const len = context.length;
    if (limit <= 0 || len < KEY) return [];
    const found: Occurrence[] = [];
    for (const o of shared ? this.index.get(keyAt(context, len)) ?? [] : []) {
      const seq = this.outputs.get(Math.floor(o / AT_LIMIT));
      if (seq !== undefined) found.push({ seq, at: o % AT_LIMIT });
    }
    // The context's own earlier occurrences (not its end, which nothing follows yet).
    for (let i = len - 1, n = 0; i >= KEY && n < MAX_OWN; i--) {
      if (context[i - 1] === context[len - 1] && context[i - 2] === context[len - 2]) {
        found.push({ seq: context, at: i });
        n++;
      }
    }
    // The longest match: how far back each occurrence agrees with the context.
    let best = 0;
    const lengths = found.map((o) => {
      let n = KEY;
      while (n < s.maxDepth && o.at - n - 1 >= 0 && len - n - 1 >= 0 && o.seq[o.at - n - 1] === context[len - n - 1]) n++;
      best = Math.max(best, n);
      return n;
    });
    let live = found.filter((_, k) => lengths[k] === best);
    const draft: number[] = [];
    const most = Math.min(limit, Math.floor(s.maxSpecFactor * best));
    let p = 1;
    while (draft.length < most && live.length > 0) {
      // The next token of each occurrence still on the path (one that ends here counts against all).
      const counts = new Map<number, number>();
      for (const o of live) {
        const at = o.at + draft.length;
        if (at < o.seq.length && !(o.seq === context && at >= len)) counts.set(o.seq[at], (counts.get(o.seq[at]) ?? 0) + 1);
      }
      let token = -1, count = 0;
      for (const [t, c] of counts) if (c > count) [token, count] = [t, c];
      p *= count / live.length;
      if (count === 0 || p < s.minTokenProb) break;
      live = live.filter((o) => o.seq[o.at + draft.length] === token);
      draft.push(token);
    }
    return draft;
  }

  /** Forgets output `id` and its occurrences. */
  private drop(id: number): void {
    const seq = this.outputs.get(id)!;
    this.outputs.delete(id);
    this.tokens -= seq.length;
    for (let at = KEY; at < seq.length; at++) {
      const key = keyAt(seq, at);
      const list = this.index.get(key);
      if (list === undefined) continue;
      const kept = list.filter((o) => Math.floor(o / AT_LIMIT) !== id);
      if (kept.length === 0) this.index.delete(key);
      else if (kept.length !== list.length) this.index.set(key, kept);
    }
  }
}

/** The index key of the two tokens before position `at` (token ids are below 2^26, so the pair is an exact number). */
function keyAt(seq: readonly number[], at: number): number {
  return seq[at - 2] * 2 ** 26 + seq[at - 1];
}
