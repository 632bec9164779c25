/**
 * A request whose route moves KV before it can start: a session's cached prefix pulled from the
 * worker holding it (peer transfer), or a prompt prefilled on a prefill-role worker whose KV then
 * moves to the worker that decodes (with that worker's cached prefix sent to the prefill worker
 * first when the route says so). Ends by queueing the request on the decoding worker.
 */
import type { SessionRoute } from "../../planner/routers.ts";
import type { GenerateRequest, GenerateResult, RequestHandle, StreamDelta } from "../engine/engine-types.ts";
import type { ClusterCounters } from "./cluster.ts";
import type { ClusterWorker } from "./cluster-worker.ts";
import type { WorkerSet } from "./worker-set.ts";

/** What the cluster follows of a hand-off: `cancel` is set by it; `submitted` is told each worker whose engine now holds the request. */
export interface HandoffHop {
  cancel: () => void;
  submitted?: (w: ClusterWorker) => void;
}

/**
 * Moves what `route` says, then submits `req` to `dec`. `hop.cancel` is replaced with what cancels
 * the step under way; a cancelled hand-off rejects with "Cancelled" at the next step boundary. After
 * the prefill has ended, the last block a worker holds for it is let go at once (handoff-tails.ts),
 * not when its hold runs out: on the prefill worker before anything is sent, on the decoding worker
 * when the cancel came during the move.
 */
export async function handOff(
  req: GenerateRequest, route: SessionRoute, dec: ClusterWorker, set: WorkerSet, counters: ClusterCounters, hop: HandoffHop, root?: number,
): Promise<RequestHandle> {
  let cancelled = false;
  hop.cancel = () => (cancelled = true);
  const sid = req.sessionId;
  let prefillHit: number | undefined;
  let promptLogprobs: GenerateResult["promptLogprobs"];
  let queueS: number | undefined;
  if (route.prefixSource !== undefined) {
    await movePrefix(set.get(route.prefixSource)!, dec, req.prompt, sid, counters, true, false, root);
    if (cancelled) throw new Error("Cancelled");
  } else if (route.prefillWorker !== null) {
    const pre = set.get(route.prefillWorker)!;
    if (route.prefixTransferBlocks > 0) await movePrefix(dec, pre, req.prompt, sid, counters, true, false, root);
    if (cancelled) throw new Error("Cancelled");
    // One token at most: the request's min_tokens is the decoding worker's to keep (here it would be refused).
    const { minTokens: _min, ...prefill } = req;
    const h = pre.engine.submit({ ...prefill, maxTokens: 1, stop: undefined, prefillOnly: true });
    hop.submitted?.(pre);
    hop.cancel = () => {
      cancelled = true;
      h.cancel();
    };
    const r = await h.result;
    // The prefill worker's engine refused the request (a worker elsewhere checks some only then): that refusal, typed.
    if (r.refused) throw r.refused;
    if (r.error) throw new Error(`The prefill on ${pre.id} failed: ${r.error}`);
    if (r.finishReason === "abort") throw new Error("Cancelled");
    // Cancelled as the prefill ended: nothing is sent, and the block held for the hand-off goes now.
    if (cancelled) throw dropped(pre, req.prompt, root);
    counters.prefillHandoffs++;
    prefillHit = r.cachedTokens;
    promptLogprobs = r.promptLogprobs;
    queueS = r.queueS;
    await movePrefix(pre, dec, req.prompt, sid, counters, false, true, root);
    if (cancelled) throw dropped(dec, req.prompt, root);
  }
  if (prefillHit === undefined) return submitted(dec, req, hop);
  // The prefill scored the prompt: the decode takes its KV from the hand-off instead of computing it again.
  const { promptLogprobs: _, ...rest } = req;
  return reportingPrefill(submitted(dec, rest, hop), prefillHit, promptLogprobs, queueS);
}

/** Submits `req` to `w`'s engine and tells `hop` (also when the engine refuses it: it is no longer on its way). */
function submitted(w: ClusterWorker, req: GenerateRequest, hop: HandoffHop): RequestHandle {
  try {
    return w.engine.submit(req);
  } finally {
    hop.submitted?.(w);
  }
}

/** Lets go of the block `w` holds for a hand-off of `prompt` that will not happen; the error to throw. */
function dropped(w: ClusterWorker, prompt: readonly number[], root: number | undefined): Error {
  w.engine.dropHandoff(prompt, root);
  return new Error("Cancelled");
}

/**
 * `h` with its result's cached tokens replaced: the decoding worker finds a handed-off prompt in its
 * cache, but the client is told what was cached before the request came (the prefill worker's hit),
 * as prefix reuse, not as the work the prefill worker just did. (vLLM's disaggregated decode counts
 * the transferred tokens as cached.) The prefill's prompt log probabilities, when asked for, go on the
 * result and the first delta, as one worker would send them; its queue time replaces the decode's
 * (the request waited there first; /metrics' queue time).
 */
function reportingPrefill(h: RequestHandle, cachedTokens: number, promptLogprobs: GenerateResult["promptLogprobs"], queueS: number | undefined): RequestHandle {
  const result = h.result.then((r) => {
    const { queueS: _decodeQueue, ...rest } = r;
    return { ...rest, cachedTokens: Math.min(r.cachedTokens, cachedTokens), ...(promptLogprobs ? { promptLogprobs } : {}), ...(queueS === undefined ? {} : { queueS }) };
  });
  const stream = withFirst(h.stream, cachedTokens, promptLogprobs);
  return { id: h.id, stream, result, cancel: () => h.cancel(), ...(h.refusal ? { refusal: h.refusal } : {}), get sessionId() { return h.sessionId; } };
}

/** `deltas` with the first's cached tokens what the client is told (see reportingPrefill), and `promptLogprobs` on it when given. */
async function* withFirst(deltas: AsyncIterable<StreamDelta>, cachedTokens: number, promptLogprobs: StreamDelta["promptLogprobs"]): AsyncIterable<StreamDelta> {
  let first = true;
  for await (const d of deltas) {
    yield first ? { ...d, ...(d.cachedTokens === undefined ? {} : { cachedTokens: Math.min(d.cachedTokens, cachedTokens) }), ...(promptLogprobs ? { promptLogprobs } : {}) } : d;
    first = false;
  }
}

/**
 * Copies the cached prefix of `tokens` from one worker to another (`count`: as a prefix move;
 * `handoff`: a prompt `from` just prefilled, whose last block goes too, prefix-transfer.ts; `root`:
 * the prompt's cache namespace, which the moved blocks keep).
 */
async function movePrefix(
  from: ClusterWorker, to: ClusterWorker, tokens: readonly number[], sessionId: string | undefined, counters: ClusterCounters, count = true,
  handoff = false, root?: number,
): Promise<void> {
  const prefix = await from.engine.exportPrefix(tokens, handoff, root);
  if (prefix === null) return;
  if (count) counters.prefixMoves++;
  counters.movedBlocks += await to.engine.importPrefix(prefix, sessionId);
}
