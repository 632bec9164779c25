/**
 * Request routers. Baseline: Dynamo's KV-aware cost, overlap_weight·(uncached prefill blocks, plus
 * blocks already queued) + active decode blocks, lowest wins. Ours: session affinity weighed
 * against load, with a per-request transfer-vs-recompute choice for the cached prefix.
 */
import { decideTransfer } from "../kv/transfer.ts";
import type { Role } from "./types.ts";

/** A worker as a router sees it. */
export interface RouteCandidate {
  id: string;
  role: Role;
  /** Leading request blocks this worker holds on device, and on device-or-host. */
  overlapDevice: number;
  overlapHost: number;
  /** Uncached prefill tokens already queued there. */
  queuedPrefillTokens: number;
  /** KV blocks in use on the worker (Dynamo's "active blocks"). */
  activeBlocks: number;
  decodeBatch: number;
  /** Sequences waiting there for a decode slot or for KV memory (optional; 0 when unknown). */
  decodeQueue?: number;
  /** Requests queued there for KV memory (optional): a new one would wait behind them. */
  memoryQueue?: number;
  /** Device blocks free or evictable there now (optional; unknown = room enough). */
  freeBlocks?: number;
  /**
   * Sessions homed there that will be back (optional; 0 when unknown): running a turn, or waiting on a
   * tool call. Each brings its next turn to this worker.
   */
  liveSessions?: number;
  /** Online estimate of its prefill speed (tokens/s) and current decode step (s). */
  prefillRate: number;
  decodeStepS: number;
  /** Rack, for link selection. */
  rack: number;
}

/** Dynamo's KV-aware router cost: lower is better. */
export function kvAwareCost(c: RouteCandidate, requestBlocks: number, blockTokens: number, overlapWeight = 1): number {
  const prefillBlocks = Math.max(0, requestBlocks - c.overlapDevice) + c.queuedPrefillTokens / blockTokens;
  return overlapWeight * prefillBlocks + c.activeBlocks;
}

/** Picks the lowest {@link kvAwareCost} (ties to the first candidate; temperature 0). */
export function routeKvAware(cands: readonly RouteCandidate[], requestBlocks: number, blockTokens: number, overlapWeight = 1): RouteCandidate | undefined {
  let best: RouteCandidate | undefined;
  let bestCost = Infinity;
  for (const c of cands) {
    const cost = kvAwareCost(c, requestBlocks, blockTokens, overlapWeight);
    if (cost < bestCost) { best = c; bestCost = cost; }
  }
  return best;
}

/** Link model the session router needs (bytes/s and latency between two workers, and to host memory). */
export interface LinkModel {
  bandwidth(fromRack: number, toRack: number): number;
  latency(fromRack: number, toRack: number): number;
  hostBandwidth: number;
}

/** One request as our router sees it. */
export interface SessionRequest {
  promptTokens: number;
  blockTokens: number;
  bytesPerBlock: number;
  /**
   * Bytes every move of a prefix carries besides its blocks: a model with recurrent state sends the
   * state after the prefix (one sequence's, engine/state-import.ts); absent: none.
   */
  stateBytes?: number;
  /** Worker that served this session last (affinity), if any. */
  lastWorker?: string;
  /**
   * The turn opens a session: it has a key not seen before, or (the cluster, src/cluster/keyless-turns.ts)
   * no key and a prompt that continues no turn it kept. Its pulls are not charged `peerMoveS` while
   * the worker it would pull from has prefill queued: it has no worker to leave, and would queue there.
   * Unset, a request is taken for a returning turn and charged.
   */
  newSession?: boolean;
}

/** Where to prefill, where to decode, and how the prefill worker gets the cached prefix. */
export interface SessionRoute {
  decodeWorker: string;
  /** null: prefill locally on the decode worker. */
  prefillWorker: string | null;
  /**
   * Prefix blocks moved to the worker that prefills (0 = recompute them): from the decode worker to
   * a prefill worker, or, with `prefixSource`, from a peer to the decode worker itself.
   */
  prefixTransferBlocks: number;
  /** The peer that sends the cached prefix to the decode worker (peer transfer; absent otherwise). */
  prefixSource?: string;
  /** Of the blocks `prefixSource` sends, those it reads from its host memory first (`peerHostBlocks`). */
  prefixSourceHostBlocks?: number;
  predictedTtftS: number;
}

/** Tunables of {@link routeSession}. */
export interface SessionRouterOptions {
  localPrefillThreshold: number;
  itlTargetS: number;
  /** Seconds of TTFT one ITL-target overshoot on a decode worker is worth (load vs affinity). */
  loadWeightS?: number;
  /** Bonus (s) for the session's last worker: its KV may also be on its way back from host. */
  affinityBonusS?: number;
  /**
   * Seconds each sequence already decoding on a worker adds to its cost (default 1 ms): spreads
   * decodes when prefill queues tie (all empty at light load), where ties would otherwise pile onto
   * the first worker.
   */
  batchWeightS?: number;
  /** How many of the least-loaded prefill workers to price per request (default 4). */
  prefillShortlist?: number;
  /**
   * Weight of the stall a local prefill imposes on the sequences already decoding on that worker
   * (each waits about as long as the prefill runs). Default 0.2, not 1: the stall is spread over the
   * hundreds of tokens of each affected sequence's ITL, while the requester pays its TTFT whole; of
   * 0, 0.2, 0.5 and 1 in the simulator, 0.2 gave the best goodput on coding and mixed-shift.
   */
  interferenceWeight?: number;
  /**
   * Seconds charged per request already waiting for KV memory on a worker (default 0: off). At 1 s it
   * cut ours' P95 TTFT under KV pressure (simulated mixed-shift, replicated KV: 9.9 s → 4.0 s) but cost
   * 6–17% goodput there, so it is not on by default.
   */
  memoryWaitS?: number;
  /**
   * Peer transfer: a worker that lacks the session's cached prefix may pull it from the worker that
   * holds the most of it (bytes over the link against recomputing), so a turn whose KV holder is busy
   * or out of memory can go to another worker without recomputing its context. Off by default.
   */
  peerTransfer?: boolean;
  /**
   * Seconds charged where the turn would wait for KV memory: the worker lacks free or evictable blocks
   * for its uncached prompt, or turns already wait there for memory (default 0: off). Only sensible
   * with `peerTransfer`, which makes leaving the holder cheap.
   */
  memoryFullS?: number;
  /**
   * Seconds charged for pulling a prefix from a peer (a move must win by at least this; default 0),
   * except for a turn that opens a session (`SessionRequest.newSession`) while the holder has prefill queued.
   */
  peerMoveS?: number;
  /**
   * With `peerTransfer`: the holder's host-memory blocks count too (it reads them from host memory
   * and sends them with its device blocks), so a session whose KV its holder offloaded can still
   * move instead of being recomputed. Default off.
   */
  peerHostBlocks?: boolean;
  /**
   * Seconds a turn opening a session (`SessionRequest.newSession`) is charged per live session already
   * homed on a worker (`RouteCandidate.liveSessions`; default 0: off). At the instant a session opens,
   * workers between turns all look idle, and ties go to the first worker; but each session homed there
   * comes back with a turn that will share its steps. A tie-breaker, not a load term: it is small next
   * to queued prefill (0.05 s is 100 tokens at 2000 tokens/s), which says what is busy now.
   */
  sessionSpreadS?: number;
  /**
   * Never charge `peerMoveS` to a turn opening a session (default false: waived only while the holder
   * has prefill queued). With it, a new session goes to an idle worker that lacks the shared system
   * prompt as readily as to the idle one holding it, so `sessionSpreadS` can spread sessions from the start.
   */
  waiveOpeningPulls?: boolean;
}

/** Our router: the candidate with the lowest predicted TTFT plus a decode-load penalty. */
export function routeSession(
  req: SessionRequest, decoders: readonly RouteCandidate[], prefillers: readonly RouteCandidate[],
  links: LinkModel, o: SessionRouterOptions,
): SessionRoute | undefined {
  const bt = req.blockTokens;
  let best: SessionRoute | undefined;
  let bestCost = Infinity;
  const loadW = o.loadWeightS ?? 0.5;
  // Only the least-loaded prefill workers are worth pricing (keeps routing O(decoders)).
  const shortlist = [...prefillers]
    .sort((a, b) => a.queuedPrefillTokens / Math.max(1, a.prefillRate) - b.queuedPrefillTokens / Math.max(1, b.prefillRate) || b.overlapDevice - a.overlapDevice)
    .slice(0, o.prefillShortlist ?? 4);
  // The prefill worker holding the most of the prompt is priced too, however long its queue: a session
  // whose worker flipped to prefill keeps its context there, and prefilling the new turn there, then
  // sending the whole context on, may beat recomputing it anywhere else.
  const prefillHolder = prefixHolder([prefillers], undefined, false);
  if (prefillHolder !== undefined && !shortlist.includes(prefillHolder)) shortlist.push(prefillHolder);
  // Every worker runs the same engine, so one fleet rate (the best measured) prices every prefill: a
  // worker's own estimate mostly reflects how short its recent prompts were (step overhead), and
  // routing on that noise sent prompts to workers that were busy decoding.
  // (A comparison, not Math.max: one worker's NaN estimate would make every cost NaN, and no route.)
  let fleetRate = 1;
  for (const c of decoders) if (c.prefillRate > fleetRate && c.prefillRate < Infinity) fleetRate = c.prefillRate;
  for (const c of prefillers) if (c.prefillRate > fleetRate && c.prefillRate < Infinity) fleetRate = c.prefillRate;
  const fromHost = o.peerHostBlocks === true;
  // A prefill-role worker can send what it holds as well as a decoder can (its role only says what it
  // is given to compute), so the holder is sought among both.
  const holder = o.peerTransfer ? prefixHolder([decoders, prefillers], req.lastWorker, fromHost) : undefined;
  const held = holder === undefined ? 0 : fromHost ? holder.overlapHost : holder.overlapDevice;
  const promptBlocks = Math.ceil(req.promptTokens / bt);
  for (const w of decoders) {
    const onDev = w.overlapDevice * bt;
    const onHost = Math.max(0, w.overlapHost - w.overlapDevice);
    const hostS = onHost === 0 ? 0 : (onHost * req.bytesPerBlock) / links.hostBandwidth;
    let uncached = Math.max(0, req.promptTokens - onDev - onHost * bt);
    const rate = fleetRate;
    // Pulling the prefix from its holder replaces recomputing the blocks this worker lacks.
    let pullS = 0, pulled = 0, pulledFromHost = 0;
    if (holder !== undefined && holder !== w && held > w.overlapHost) {
      const missing = held - w.overlapHost;
      // The holder reads the blocks it keeps in host memory before they go on the link.
      const fromHostBlocks = Math.max(0, held - Math.max(holder.overlapDevice, w.overlapHost));
      const readS = (fromHostBlocks * req.bytesPerBlock) / links.hostBandwidth;
      const d = decideTransfer({
        blocks: missing, bytesPerBlock: req.bytesPerBlock, linkBandwidthBytesPerS: links.bandwidth(holder.rack, w.rack),
        linkLatencyS: links.latency(holder.rack, w.rack) + readS, recomputeS: Math.min(uncached, missing * bt) / rate, extraBytes: req.stateBytes,
      });
      if (d.choice === "transfer") {
        pullS = d.transferS;
        pulled = missing;
        pulledFromHost = fromHostBlocks;
        uncached = Math.max(0, req.promptTokens - held * bt);
      }
    }
    let route: SessionRoute = {
      decodeWorker: w.id, prefillWorker: null, prefixTransferBlocks: pulled,
      predictedTtftS: Math.max(hostS, pullS) + (w.queuedPrefillTokens + uncached) / rate,
    };
    if (pulled > 0) {
      route.prefixSource = holder!.id;
      if (pulledFromHost > 0) route.prefixSourceHostBlocks = pulledFromHost;
    }
    // A local prefill stalls every sequence decoding there for about as long as it runs.
    const localStallS = (uncached / rate) * w.decodeBatch * (o.interferenceWeight ?? 0.2);
    let stallS = localStallS;
    if (pulled === 0 && uncached > o.localPrefillThreshold && w.role !== "mixed") {
      const remote = bestRemote(req, w, w.overlapHost, shortlist, links, fleetRate);
      if (remote !== undefined && remote.predictedTtftS < route.predictedTtftS + localStallS) { route = remote; stallS = 0; }
    }
    // Slow steps, and sequences already queued for a decode slot, both count as decode overload.
    // A NaN step time measures nothing: no overload (NaN would make the cost NaN and drop the worker).
    const stepS = w.decodeStepS > 0 ? w.decodeStepS : 0;
    const overload = Math.max(0, stepS / o.itlTargetS - 0.8) + (w.decodeQueue ?? 0) / 32;
    // Admission is FIFO: a turn sent where others wait for KV memory waits behind them (off by default).
    let cost = route.predictedTtftS + stallS + (w.memoryQueue ?? 0) * (o.memoryWaitS ?? 0) + loadW * overload + (o.batchWeightS ?? 0.001) * (w.decodeBatch + (w.decodeQueue ?? 0));
    // The charge keeps a returning session from hopping off its worker on small gains. A new session
    // moves nothing of its own: it pulls a prefix it shares (a common system prompt). While the worker
    // holding that prefix has no prefill queued, it is charged all the same and starts there (waived
    // always, new sessions spread by pulls onto workers whose decode pools they later overloaded:
    // simulated computer-use at load 3, 5.5% less goodput over three seeds); once the holder has
    // prefill queued, charging it piled every new session sharing the prompt onto that one worker.
    if (pulled > 0 && !(req.newSession === true && (o.waiveOpeningPulls === true || holder!.queuedPrefillTokens > 0))) cost += o.peerMoveS ?? 0;
    if (o.memoryFullS && ((w.memoryQueue ?? 0) > 0 || promptBlocks - w.overlapDevice > (w.freeBlocks ?? Infinity))) cost += o.memoryFullS;
    if (req.newSession === true) cost += (o.sessionSpreadS ?? 0) * (w.liveSessions ?? 0);
    if (w.id === req.lastWorker) cost -= o.affinityBonusS ?? 0;
    if (cost < bestCost) { bestCost = cost; best = route; }
  }
  return best;
}

/**
 * The worker of `groups` (in order) holding the most of the prefix on device (or on device and host,
 * with `withHost`; the session's last worker on ties); undefined when none holds any.
 */
function prefixHolder(groups: readonly (readonly RouteCandidate[])[], lastWorker: string | undefined, withHost: boolean): RouteCandidate | undefined {
  let best: RouteCandidate | undefined;
  let bestHeld = 0;
  for (const group of groups) {
    for (const c of group) {
      const held = withHost ? c.overlapHost : c.overlapDevice;
      if (held === 0) continue;
      if (best === undefined || held > bestHeld || (held === bestHeld && c.id === lastWorker)) { best = c; bestHeld = held; }
    }
  }
  return best;
}

/**
 * The fastest prefill worker for a prompt that decodes on `w`, which holds its first `held` blocks.
 * The prefill worker computes what neither it nor `w` holds (fetching from `w` what only `w` holds,
 * where that beats recomputing it), then sends `w` every block `w` lacks.
 */
function bestRemote(
  req: SessionRequest, w: RouteCandidate, held: number,
  prefillers: readonly RouteCandidate[], links: LinkModel, rate: number,
): SessionRoute | undefined {
  let best: SessionRoute | undefined;
  const bt = req.blockTokens;
  const backBlocks = Math.max(0, Math.ceil(req.promptTokens / bt) - held);
  for (const p of prefillers) {
    // The prefill worker needs the prefix it lacks: fetch it from w, or recompute it.
    const missing = Math.max(0, held - p.overlapDevice);
    const d = decideTransfer({
      blocks: missing, bytesPerBlock: req.bytesPerBlock, linkBandwidthBytesPerS: links.bandwidth(w.rack, p.rack),
      linkLatencyS: links.latency(w.rack, p.rack), recomputeS: (missing * bt) / rate, extraBytes: req.stateBytes,
    });
    const prefixS = Math.min(d.transferS, d.recomputeS);
    // Past what either holds, the prompt is computed on p.
    const computed = Math.max(0, req.promptTokens - Math.max(held, p.overlapDevice) * bt);
    const backS = links.latency(p.rack, w.rack) + (backBlocks * req.bytesPerBlock + (req.stateBytes ?? 0)) / links.bandwidth(p.rack, w.rack);
    const ttft = p.queuedPrefillTokens / rate + prefixS + computed / rate + backS;
    if (best === undefined || ttft < best.predictedTtftS) {
      best = {
        decodeWorker: w.id, prefillWorker: p.id, prefixTransferBlocks: d.choice === "transfer" ? missing : 0,
        predictedTtftS: ttft,
      };
    }
  }
  return best;
}
