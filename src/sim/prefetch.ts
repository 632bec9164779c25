/**
 * Ours' host-tier prefetch in the simulator (DESIGN.md: "offload to host memory instead of dropping,
 * prefetch back before the predicted return"; the engine's src/engine/kv-offload.ts does the same).
 * A turn that ends in a tool call schedules a look at its session's chain shortly before the return
 * `SessionTracker` predicts (the prediction the retention policy ranks by, never the workload's
 * actual gap). Blocks of the chain that were offloaded to host memory meanwhile are copied back as
 * cached blocks of the session, as many as fit in free blocks and in evictable blocks the retention
 * policy ranks below them (kv/prefetch.ts). The copy takes host-link time from the prefetch on; a
 * turn that arrives before it lands waits only the rest (admission.ts), and a prefetched block that
 * goes unused is an ordinary cached block again. The baselines fetch on arrival (Dynamo/KVBM).
 */
import { hashBlock } from "../../kv/hash.ts";
import { prefetchBlockCount } from "../../kv/prefetch.ts";
import { prefetchStartTime } from "../../kv/tiers.ts";
import type { BlockMeta } from "../../kv/types.ts";
import type { ClusterSim } from "./simulator.ts";
import type { SimWorker } from "./worker.ts";
import type { SessionPlan } from "./workload-types.ts";

/** Seconds between tries for a session whose chain did not fit whole (memory was short). */
const RETRY_S = 1;
/** Tries per wait: a session overdue for long (a long tool) stops being retried. */
const MAX_TRIES = 8;

/** A prefetch due for `plan`'s session on worker `w` (the worker its last turn ran on). */
export interface PrefetchEvent {
  t: "prefetch";
  w: SimWorker;
  plan: SessionPlan;
  tries: number;
}

/** What prefetch looks came to (one look per try), for reports. */
export interface PrefetchStats {
  looks: number;
  /** The session had returned (or ended) before the look. */
  returnedFirst: number;
  /** Nothing of its chain was on host (all still on device, or dropped from both tiers). */
  nothingOnHost: number;
  /** The look came early: the prediction had moved later, so it was put off. */
  putOff: number;
  /** No free block and nothing ranked below the session's: nothing copied. */
  noRoom: number;
  /** Part of what was on host copied (room for no more), and all of it. */
  partial: number;
  whole: number;
}

/** Fresh counters. */
export function newPrefetchStats(): PrefetchStats {
  return { looks: 0, returnedFirst: 0, nothingOnHost: 0, putOff: 0, noRoom: 0, partial: 0, whole: 0 };
}

/** Where a session's prefetched blocks land: on `w`, blocks from `fromBlock` on, at `landAt`. */
export interface PrefetchLanding {
  w: SimWorker;
  fromBlock: number;
  landAt: number;
}

/**
 * A turn of `plan` ended on `w` with a tool call (its stream length already updated): schedules the
 * first look at the session's chain `leadS` plus the host transfer of the whole chain before its
 * predicted return (an upper bound; the look itself recomputes it from what is on host then).
 */
export function schedulePrefetch(sim: ClusterSim, w: SimWorker, plan: SessionPlan, leadS: number): void {
  const blocks = Math.floor((sim.streamLen.get(plan.idx) ?? 0) / sim.bt);
  if (w.host === undefined || blocks === 0 || plan.turns[0].fixedChunks !== undefined) return;
  const returnAt = sim.sessions.predictedReturnTime(plan.id, sim.now);
  sim.q.push(prefetchStartTime(returnAt, w.host.transferSeconds(blocks, sim.movedBytesPerBlock), sim.now, leadS), { t: "prefetch", w, plan, tries: 0 });
}

/** A scheduled prefetch is due: copies what it may of the session's host-held chain back to the device. */
export function prefetchDue(sim: ClusterSim, e: PrefetchEvent, leadS: number): void {
  const { w, plan } = e;
  const host = w.host;
  const st = sim.prefetchStats;
  st.looks++;
  // Only for a session still waiting on its tool call, on a worker that still serves and decodes
  // (a worker flipped to prefill meanwhile is not where the session's next turn will run).
  if (sim.sessions.status(plan.id) !== "waiting-tool") { st.returnedFirst++; return; }
  if (host === undefined || w.state !== "serving" || w.role === "prefill") return;
  const { chunks, hashes } = sessionChain(sim, plan);
  const k = w.pool.cachedPrefixTokens(chunks);
  const onHost = (from: number, n: number, touch: boolean) =>
    host.matchContinuation(from === 0 ? null : hashes[from - 1], hashes.slice(from, from + n), (i) => [chunks[from + i]], touch);
  const h = onHost(k, chunks.length - k, false);
  if (h === 0) { st.nothingOnHost++; return; }
  // The prediction may have moved later since the look was scheduled (tools' gaps are learned online).
  const start = prefetchStartTime(sim.sessions.predictedReturnTime(plan.id, sim.now), host.transferSeconds(h, sim.movedBytesPerBlock), sim.now, leadS);
  if (start > sim.now) { st.putOff++; sim.q.push(start, e); return; }
  // Hold the device prefix while allocating, so the prefetch cannot evict the chain it continues.
  const m = w.pool.matchPrefixHashed(chunks, hashes);
  const policy = w.retention;
  const free = w.pool.numFreeBlocks() - (policy?.size ?? 0);
  const n = policy === undefined ? Math.min(h, Math.max(0, free)) : prefetchBlockCount(policy, plan.id, k, h, free, sim.now);
  if (n === 0) st.noRoom++;
  else if (n < h) st.partial++;
  else st.whole++;
  if (n > 0) {
    onHost(k, n, true); // the copies on host were used: most recently used there
    if (n > free) policy?.rerank?.(); // evict by the scores prefetchBlockCount just ranked with
    const fresh = w.pool.tryAllocate(n)!;
    const sys: BlockMeta = { sessionId: plan.id, type: "system" };
    const tool: BlockMeta = { sessionId: plan.id, type: "tool-output" };
    const tok = sim.tok;
    for (let i = 0; i < n; i++) {
      const c = k + i;
      tok[0] = chunks[c];
      const parent = c === 0 ? null : i === 0 ? m.blockIds[k - 1] : fresh[i - 1];
      if (w.pool.commitBlock(fresh[i], parent, tok, c < plan.sharedChunks.length ? sys : tool) === null) break;
    }
    w.pool.release(m.blockIds.concat(fresh), { sessionId: plan.id });
    const landAt = sim.now + host.transferSeconds(n, sim.movedBytesPerBlock);
    // A retry's copy may follow an earlier one still on its way: the turn waits for both.
    const prev = sim.prefetchLanding.get(plan.id);
    const inFlight = prev !== undefined && prev.w === w && prev.landAt > sim.now;
    sim.prefetchLanding.set(plan.id, inFlight ? { w, fromBlock: Math.min(prev.fromBlock, k), landAt: Math.max(prev.landAt, landAt) } : { w, fromBlock: k, landAt });
    sim.prefetchedBlocks += n;
  } else w.pool.release(m.blockIds, { sessionId: plan.id });
  if (n < h && e.tries + 1 < MAX_TRIES) sim.q.push(sim.now + RETRY_S, { ...e, tries: e.tries + 1 });
}

/**
 * When `w` admits a turn of session `sessionId` whose first `deviceBlocks` blocks are on device:
 * the time the prefetched ones among them land (0 when none are still on their way).
 */
export function prefetchLandsAt(sim: ClusterSim, w: SimWorker, sessionId: string, deviceBlocks: number): number {
  const p = sim.prefetchLanding.get(sessionId);
  return p !== undefined && p.w === w && deviceBlocks > p.fromBlock && p.landAt > sim.now ? p.landAt : 0;
}

/** The content ids and chained hashes of the blocks the session's next prompt will resend. */
function sessionChain(sim: ClusterSim, plan: SessionPlan): { chunks: number[]; hashes: number[] } {
  const full = Math.floor((sim.streamLen.get(plan.idx) ?? 0) / sim.bt);
  const chunks = new Array<number>(full);
  for (let c = 0; c < full; c++) chunks[c] = c < plan.sharedChunks.length ? plan.sharedChunks[c] : plan.chunkBase + c;
  // Extends the session's hash chain as the next request would (same values; buildRequest reuses them).
  let hs = sim.sessHashes.get(plan.idx);
  if (hs === undefined) sim.sessHashes.set(plan.idx, (hs = []));
  for (let c = hs.length; c < full; c++) hs.push(hashBlock(c === 0 ? null : hs[c - 1], [chunks[c]]));
  return { chunks, hashes: hs.slice(0, full) };
}
