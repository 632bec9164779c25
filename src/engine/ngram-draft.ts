/**
 * N-gram speculative decoding's drafts (vLLM's `"method": "ngram"`, prompt lookup decoding): the
 * tokens that followed the latest earlier occurrence of the sequence's last n tokens, longest n
 * first. Agents re-read and re-write what their context already holds (a file they edit, a tool
 * result they quote, JSON keys), so such copies are often right; the engine verifies every draft
 * token against the model in one step and keeps only what the model itself would have sampled.
 * Pure CPU code.
 */
import type { DraftModelSpeculation } from "./draft-model.ts";
import type { MtpSpeculation } from "./mtp-drafts.ts";
import type { SuffixSpeculation } from "./suffix-draft.ts";

/** How drafts are proposed (the engine's `speculative` option; vLLM's `--speculative-config` names in comments). */
export interface NgramSpeculation {
  method: "ngram";
  /** Draft tokens per step at most (`num_speculative_tokens`). */
  numTokens: number;
  /** Longest suffix matched (`prompt_lookup_max`). */
  maxN: number;
  /** Shortest suffix matched (`prompt_lookup_min`). */
  minN: number;
  /**
   * No drafts while more than this many sequences run (`disable_by_batch_size`): a large batch already
   * fills the device, and rejected draft tokens would only add work. Absent: drafts at any batch.
   */
  disableByBatchSize?: number;
}

/**
 * A speculation setting: n-gram (prompt lookup), suffix drafts (suffix-draft.ts), a draft model
 * (draft-model.ts), the model's own multi-token-prediction block or an EAGLE head (mtp-drafts.ts).
 */
export type Speculation = NgramSpeculation | SuffixSpeculation | DraftModelSpeculation | MtpSpeculation;

/** vLLM's suffix length when neither prompt_lookup_max nor prompt_lookup_min is given. */
export const NGRAM_DEFAULT_N = 5;

/** The `--speculative-config` keys read per method (vLLM's names); any other key is refused rather than ignored. */
const CONFIG_KEYS: Record<Speculation["method"], readonly string[]> = {
  ngram: ["method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min", "disable_by_batch_size"],
  suffix: [
    "method", "num_speculative_tokens", "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob", "disable_by_batch_size",
  ],
  draft_model: ["method", "model", "num_speculative_tokens", "num_speculative_tokens_schedule", "disable_by_batch_size"],
  mtp: ["method", "num_speculative_tokens", "num_speculative_tokens_schedule", "disable_by_batch_size"],
  eagle: ["method", "model", "num_speculative_tokens", "num_speculative_tokens_schedule", "disable_by_batch_size"],
  eagle3: ["method", "model", "num_speculative_tokens", "num_speculative_tokens_schedule", "disable_by_batch_size"],
};

/** vLLM's older per-model names of the multi-token-prediction method, all read as "mtp". */
const MTP_NAMES: readonly unknown[] = ["mtp", "deepseek_mtp", "glm4_moe_mtp", "qwen3_next_mtp"];

/** Longest suffix draft: vLLM drafts up to its tree depth when num_speculative_tokens is absent, this engine up to this many. */
const SUFFIX_MAX_TOKENS = 64;

/** vLLM's spellings of the n-gram method in `model` or `method` (`"[ngram]"` from its older `--speculative-model`). */
const NGRAM_NAMES: readonly unknown[] = ["ngram", "[ngram]"];

/** A speculation setting out of range: names the field and quotes the value. */
export class SpeculationConfigError extends RangeError {
  override name = "SpeculationConfigError";
}

/** Checks a speculation setting; throws SpeculationConfigError naming the bad field. */
export function checkSpeculation<S extends Speculation>(s: S): S {
  const whole = (name: string, v: number, lo: number, hi: number) => {
    if (!Number.isInteger(v) || v < lo || v > hi) throw new SpeculationConfigError(`The speculative ${name} must be an integer from ${lo} to ${hi}, got ${v}`);
  };
  if (s.method === "suffix") {
    whole("num_speculative_tokens", s.numTokens, 1, SUFFIX_MAX_TOKENS);
    whole("suffix_decoding_max_tree_depth", s.maxDepth, 2, 256);
    whole("suffix_decoding_max_cached_requests", s.maxCachedRequests, 0, 1 << 20);
    if (!(s.maxSpecFactor > 0 && s.maxSpecFactor <= 64)) throw new SpeculationConfigError(`The speculative suffix_decoding_max_spec_factor must be a number above 0 and at most 64, got ${s.maxSpecFactor}`);
    if (!(s.minTokenProb >= 0 && s.minTokenProb <= 1)) throw new SpeculationConfigError(`The speculative suffix_decoding_min_token_prob must be a number from 0 to 1, got ${s.minTokenProb}`);
    if (s.disableByBatchSize !== undefined) whole("disable_by_batch_size", s.disableByBatchSize, 1, 1 << 20);
    return s;
  }
  if (s.method === "draft_model") {
    whole("num_speculative_tokens", s.numTokens, 1, 32);
    if (typeof s.model !== "string" || s.model === "") throw new SpeculationConfigError(`The speculative model must be the path of a draft model, got ${JSON.stringify(s.model)}`);
    if (s.disableByBatchSize !== undefined) whole("disable_by_batch_size", s.disableByBatchSize, 1, 1 << 20);
    if (s.schedule !== undefined && s.schedule !== "heuristic" && s.schedule !== "constant" && s.schedule !== "cost") {
      throw new SpeculationConfigError(`The speculative num_speculative_tokens_schedule must be "heuristic", "constant" or "cost", got ${JSON.stringify(s.schedule)}`);
    }
    return s;
  }
  if (s.method === "mtp" || s.method === "eagle" || s.method === "eagle3") {
    whole("num_speculative_tokens", s.numTokens, 1, 32);
    if (s.method !== "mtp" && (typeof s.model !== "string" || s.model === "")) {
      throw new SpeculationConfigError(`The speculative model must be the directory of an EAGLE head for method "${s.method}", got ${JSON.stringify(s.model ?? null)}`);
    }
    if (s.disableByBatchSize !== undefined) whole("disable_by_batch_size", s.disableByBatchSize, 1, 1 << 20);
    if (s.schedule !== undefined && s.schedule !== "heuristic" && s.schedule !== "constant") {
      throw new SpeculationConfigError(`The speculative num_speculative_tokens_schedule must be "heuristic" or "constant" for method "${s.method}", got ${JSON.stringify(s.schedule)}`);
    }
    return s;
  }
  if (s.method !== "ngram") throw new SpeculationConfigError(`Speculative method must be "ngram", "suffix", "draft_model", "mtp", "eagle3" or "eagle", got ${JSON.stringify((s as { method: unknown }).method)}`);
  whole("num_speculative_tokens", s.numTokens, 1, 32);
  whole("prompt_lookup_max", s.maxN, 1, 64);
  whole("prompt_lookup_min", s.minN, 1, 64);
  if (s.disableByBatchSize !== undefined) whole("disable_by_batch_size", s.disableByBatchSize, 1, 1 << 20);
  if (s.minN > s.maxN) throw new SpeculationConfigError(`The speculative prompt_lookup_min (${s.minN}) exceeds prompt_lookup_max (${s.maxN})`);
  return s;
}

/**
 * Up to `limit` draft tokens for `tokens`' continuation: for n from `maxN` down to `minN`, the last
 * n tokens are looked for earlier in `tokens` (the latest occurrence wins: an agent's newest copy of
 * a file is the one it edits), and the tokens after that occurrence are the draft. Empty when no
 * suffix of at least `minN` tokens occurred before.
 */
export function ngramDraft(tokens: readonly number[], s: Pick<NgramSpeculation, "maxN" | "minN">, limit: number): number[] {
  const len = tokens.length;
  if (limit <= 0 || len < 2) return [];
  const last = tokens[len - 1];
  const maxN = Math.min(s.maxN, len - 1);
  // One pass from the newest candidate back: each occurrence of the last token is matched backwards
  // as far as maxN; the first to reach a length keeps it (the latest), and maxN ends the search.
  let best = -1, bestN = 0;
  for (let i = len - 2; i >= 0 && bestN < maxN; i--) {
    if (tokens[i] !== last) continue;
    let n = 1;
    while (n < maxN && n <= i && tokens[i - n] === tokens[len - 1 - n]) n++;
    if (n > bestN) [best, bestN] = [i + 1, n];
  }
  // The draft copies what followed the occurrence, stopping where the sequence's own end is.
  return bestN >= s.minN ? tokens.slice(best, Math.min(best + limit, len)) : [];
}

/**
 * vLLM's `--speculative-config` JSON for n-gram drafts, e.g. `{"method": "ngram",
 * "num_speculative_tokens": 5, "prompt_lookup_max": 4}`: a missing lookup bound takes the other's
 * value, both missing take 5 (vLLM's defaults); or for suffix drafts, e.g. `{"method": "suffix"}`
 * (vLLM's `suffix_decoding_*` keys and defaults); or for a draft model, e.g. `{"method": "draft_model",
 * "model": "draft.gguf", "num_speculative_tokens": 4}` (as in vLLM, a `model` without a `method` means
 * one, unless it is `"ngram"` or `"[ngram]"`, vLLM's older spelling of the n-gram method); or for the
 * model's own multi-token-prediction block, `{"method": "mtp", "num_speculative_tokens": 2}` (one token
 * by default; vLLM's older "deepseek_mtp", "glm4_moe_mtp" and "qwen3_next_mtp" are read as "mtp"); or
 * for an EAGLE head, `{"method": "eagle3", "model": "head-dir", "num_speculative_tokens": 3}` ("eagle"
 * likewise; `model` and `num_speculative_tokens` required, as vLLM requires them).
 */
export function parseSpeculativeConfig(text: string): Speculation {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new SpeculationConfigError(`The speculative config must be a JSON object, got ${JSON.stringify(text)}`);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new SpeculationConfigError(`The speculative config must be a JSON object, got ${JSON.stringify(text)}`);
  const o = v as Record<string, unknown>;
  // As vLLM: a `model` without a `method` is a draft model, unless it names the n-gram method.
  const named = NGRAM_NAMES.includes(o.method ?? o.model) ? "ngram" : o.method ?? (o.model !== undefined ? "draft_model" : undefined);
  const method = MTP_NAMES.includes(named) ? "mtp" : named;
  if (method !== "ngram" && method !== "suffix" && method !== "draft_model" && method !== "mtp" && method !== "eagle" && method !== "eagle3") {
    throw new SpeculationConfigError(
      `Speculative method ${JSON.stringify(method ?? null)} is not supported; "ngram" (prompt lookup), "suffix" (suffix decoding), "draft_model", "mtp" (the model's own multi-token-prediction block), "eagle3" and "eagle" (an EAGLE head) are`,
    );
  }
  const keys = CONFIG_KEYS[method];
  // A `model` naming the n-gram method is that method's spelling, not a key of its own.
  const unknown = Object.keys(o).filter((k) => !keys.includes(k) && !(k === "model" && method === "ngram" && NGRAM_NAMES.includes(o.model)));
  if (unknown.length > 0) throw new SpeculationConfigError(`Unknown speculative config key "${unknown[0]}" for method "${method}"; this server reads ${keys.join(", ")}`);
  const num = (key: string): number | undefined => {
    const x = o[key];
    if (x === undefined) return undefined;
    if (typeof x !== "number") throw new SpeculationConfigError(`The speculative ${key} must be a number, got ${JSON.stringify(x)}`);
    return x;
  };
  const batch = num("disable_by_batch_size");
  const numTokens = num("num_speculative_tokens");
  if (method === "draft_model") {
    if (typeof o.model !== "string" || o.model === "") throw new SpeculationConfigError(`The speculative model must be the path of a draft model, got ${JSON.stringify(o.model ?? null)}`);
    if (numTokens === undefined) throw new SpeculationConfigError("The speculative config needs num_speculative_tokens");
    const schedule = o.num_speculative_tokens_schedule as DraftModelSpeculation["schedule"];
    return checkSpeculation({ method, model: o.model, numTokens, ...(batch !== undefined ? { disableByBatchSize: batch } : {}), ...(schedule !== undefined ? { schedule } : {}) });
  }
  // As vLLM: one draft token by default, the block's own prediction (DeepSeek V3 and GLM-4.5 train one).
  if (method === "mtp") {
    const schedule = o.num_speculative_tokens_schedule as MtpSpeculation["schedule"];
    return checkSpeculation({ method, numTokens: numTokens ?? 1, ...(batch !== undefined ? { disableByBatchSize: batch } : {}), ...(schedule !== undefined ? { schedule } : {}) });
  }
  if (method === "eagle" || method === "eagle3") {
    if (typeof o.model !== "string" || o.model === "") throw new SpeculationConfigError(`The speculative model must be the directory of an EAGLE head for method "${method}", got ${JSON.stringify(o.model ?? null)}`);
    if (numTokens === undefined) throw new SpeculationConfigError("The speculative config needs num_speculative_tokens");
    const schedule = o.num_speculative_tokens_schedule as MtpSpeculation["schedule"];
    return checkSpeculation({ method, model: o.model, numTokens, ...(batch !== undefined ? { disableByBatchSize: batch } : {}), ...(schedule !== undefined ? { schedule } : {}) });
  }
  if (method === "suffix") {
    // vLLM's defaults; the draft length defaults to the depth (within this engine's longest draft,
    // so a deep tree alone is not refused for a num_speculative_tokens nobody gave).
    const maxDepth = num("suffix_decoding_max_tree_depth") ?? 24;
    return checkSpeculation({
      method: "suffix", numTokens: numTokens ?? Math.min(maxDepth, SUFFIX_MAX_TOKENS), maxDepth, maxCachedRequests: num("suffix_decoding_max_cached_requests") ?? 10000,
      maxSpecFactor: num("suffix_decoding_max_spec_factor") ?? 1, minTokenProb: num("suffix_decoding_min_token_prob") ?? 0.1, ...(batch !== undefined ? { disableByBatchSize: batch } : {}),
    });
  }
  if (numTokens === undefined) throw new SpeculationConfigError("The speculative config needs num_speculative_tokens");
  const max = num("prompt_lookup_max"), min = num("prompt_lookup_min");
  return checkSpeculation({
    method: "ngram", numTokens, maxN: max ?? min ?? NGRAM_DEFAULT_N, minN: min ?? max ?? NGRAM_DEFAULT_N, ...(batch !== undefined ? { disableByBatchSize: batch } : {}),
  });
}
