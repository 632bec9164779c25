/**
 * Log probabilities of sampled tokens (OpenAI `logprobs` / `top_logprobs`), from the model's raw
 * logits: before logit biases, penalties, temperature and top-k/top-p, as vLLM reports by default.
 * Computed on the host from the rows of the requests that ask, in f64.
 */

/** The most top alternatives a request may ask for at each step (OpenAI's limit for chat). */
export const MAX_TOP_LOGPROBS = 20;

/** One generated token's log probability and the most likely alternatives at its step. */
export interface TokenLogprob {
  id: number;
  logprob: number;
  /** 1 + how many tokens are likelier than this one (vLLM's rank; ties share the better rank). */
  rank: number;
  /** The `n` most likely tokens at this step as [id, logprob], most likely first (ties: lower id). */
  top: [number, number][];
}

/** The log probability of `id` and the `top` most likely tokens under softmax(`logits`). */
export function tokenLogprob(logits: Float32Array, id: number, top: number): TokenLogprob {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i] > max) max = logits[i];
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i] - max);
  const logZ = max + Math.log(sum);
  // Selection of the best `top` by insertion: top ≤ 20, so O(vocab · top) at worst, O(vocab) typically.
  const best: number[] = [];
  const k = Math.min(top, logits.length);
  for (let i = 0; k > 0 && i < logits.length; i++) {
    if (best.length === k && !(logits[i] > logits[best[k - 1]])) continue;
    let j = best.length < k ? best.length : k - 1;
    while (j > 0 && logits[i] > logits[best[j - 1]]) {
      if (j < k) best[j] = best[j - 1];
      j--;
    }
    best[j] = i;
  }
  let rank = 1;
  for (let i = 0; i < logits.length; i++) if (logits[i] > logits[id]) rank++;
  return { id, logprob: logits[id] - logZ, rank, top: best.map((t) => [t, logits[t] - logZ]) };
}
