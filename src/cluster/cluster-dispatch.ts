/**
 * A request's way into a cluster past its front door: routed over the live workers (our router or
 * Dynamo's KV-aware cost, cluster-router.ts), queued on its decoding worker directly or through a
 * hand-off (a prefill elsewhere, or a cached prefix pulled from a peer: handoff.ts), and counted in the
 * planner's request window when it arrives and when it finishes. What the cluster's parts hold is
 * read here; what it sets (sessions placed, workers' in-flight counts) is the cluster's own state.
 */
import { chainHashes } from "../../kv/index.ts";
import type { RouteCandidate, SessionRoute } from "../../planner/routers.ts";
import {
  EngineOverloadedError, type GenerateRequest, NoWorkerError, type RequestHandle,
} from "../engine/engine-types.ts";
import { cacheRootOf } from "../engine/engine-adapters.ts";
import type { ClusterCounters, ClusterOptions } from "./cluster-types.ts";
import { IN_PROCESS_LINK, routeRequest } from "./cluster-router.ts";
import { relayHandle } from "./relay-handle.ts";
import type { RequestWindow } from "./request-window.ts";
import type { WorkerSet } from "./worker-set.ts";
import { handOff, type HandoffHop } from "./handoff.ts";
import { adapterRequest, type AdapterEntry, underClientName } from "./cluster-adapters.ts";
import type { ClusterControl } from "./cluster-control.ts";
import type { ClusterSessions, SessionPlace } from "./cluster-sessions.ts";

/** What a cluster's dispatch reads and updates: the cluster's own parts. */
export interface DispatchParts {
  readonly set: WorkerSet;
  readonly window: RequestWindow;
  readonly sessions: ClusterSessions;
  readonly control: ClusterControl;
  readonly counters: ClusterCounters;
  readonly options: ClusterOptions;
  readonly blockSize: number;
  /** The cluster's clock (ms). */
  readonly now: () => number;
}

/** Routes and queues requests that passed the front door; numbers every handle the cluster makes. */
export class ClusterDispatch {
  private nextId = 0;
  private readonly set: WorkerSet;
  private readonly window: RequestWindow;
  private readonly sessions: ClusterSessions;
  private readonly control: ClusterControl;
  private readonly counters: ClusterCounters;
  private readonly o: ClusterOptions;
  private readonly blockSize: number;
  private readonly now: () => number;

  constructor(p: DispatchParts) {
    this.set = p.set;
    this.window = p.window;
    this.sessions = p.sessions;
    this.control = p.control;
    this.counters = p.counters;
    this.o = p.options;
    this.blockSize = p.blockSize;
    this.now = p.now;
  }

  /** A new handle id (ids are the cluster's, whichever worker serves). */
  newId(): number {
    return this.nextId++;
  }

  /** Routes and queues a request past the front door; `arrivedAt`: when the client sent it (the cluster's clock). */
  enter(req: GenerateRequest, maxTokens: number, lora: AdapterEntry | undefined, newSession: boolean, arrivedAt: number): RequestHandle {
    const keyed = req.sessionId !== undefined;
    const root = cacheRootOf(lora?.root, req.cacheSalt);
    const hashes = chainHashes(req.prompt, this.blockSize, undefined, root ?? null);
    // A request naming no session may continue a conversation whose turn ended here (keyless-turns.ts).
    const place = this.sessions.locate(req.sessionId, req.prompt, hashes, root);
    const { route, cands } = this.route(req, hashes, place);
    // The continuation keeps the name its worker gave the conversation wherever it goes now: a worker
    // it moves to would make up another (its pulled blocks hold no answer of that name's).
    if (place.continuedAs !== undefined) req = { ...req, sessionId: place.continuedAs };
    // The workers hold a reloaded adapter under a name of its own (cluster-adapters.ts); what they say comes back under the client's.
    const asked = req.adapter;
    if (lora && lora.workerName !== asked) req = { ...req, adapter: lora.workerName };
    const dec = this.set.get(route.decodeWorker)!;
    const id = this.newId();
    const hop: HandoffHop = { cancel: () => {} };
    let tStart = 0;
    const direct = route.prefillWorker === null && route.prefixSource === undefined;
    // A hand-off answers at once and submits to the decoding worker later: the client's mistakes are
    // found now, before any KV moves (a worker's refusal then would reach the client as a 500).
    if (!direct) dec.engine.check(req);
    const settleHandoff = direct ? undefined : this.awaitingHandoff(req, route, cands, hop);
    // Queued first: a request the worker refuses (the client's mistake, or a full queue) spends none of
    // the planner's new-session budget, counts as no arrival and leaves the session unplaced.
    const h: RequestHandle = underClientName(lora, asked, () => direct ? this.countingRejection(() => dec.engine.submit(req)) : relayHandle(
      id, req.prompt.length, req.sessionId,
      handOff(req, route, dec, this.set, this.counters, hop, root).then((inner) => {
        tStart = this.now();
        return inner;
      }).finally(settleHandoff),
      () => hop.cancel(),
    ));
    const refund = newSession ? this.control.spendNewSession() : undefined;
    // Every worker the request touches stays in the cluster until it is done (see removeWorker).
    const touched = [dec, ...[route.prefillWorker, route.prefixSource].flatMap((id) => (id == null ? [] : [this.set.get(id)!]))];
    for (const w of touched) w.inFlight++;
    const best = cands.reduce((a, c) => Math.max(a, c.overlapDevice), 0);
    const arrive = () => this.window.arrived(req.prompt.length, Math.max(0, req.prompt.length - best * this.blockSize), maxTokens);
    if (req.sessionId !== undefined) this.sessions.placed(req.sessionId, dec.id);
    // A refusal only the worker finds comes later (a worker elsewhere, a hand-off's decoding worker): it gives back the new
    // session's budget and place. A direct request counts as an arrival once taken; a hand-off's, whose prompt was prefilled, at once.
    if (!(direct && h.refusal)) arrive();
    void h.refusal?.then((refused) => {
      if (!refused) return void (direct && arrive());
      refund?.();
      if (newSession && keyed) this.sessions.unplace(req.sessionId!, dec.id);
    });
    const t0 = arrivedAt;
    if (direct) tStart = this.now();
    const loraEnded = lora ? adapterRequest(lora) : undefined;
    const release = () => {
      for (const w of touched) w.inFlight--;
      loraEnded?.();
    };
    const result = h.result.finally(release).then((r) => {
      // The session the worker inferred is placed for its tool waits; the turn's end kept for the next turn's route.
      if (!keyed) this.sessions.keylessEnded(req.prompt, hashes, root, h.sessionId, dec.id);
      return this.window.finished(r, t0, tStart, maxTokens);
    });
    // The session may be known only later (inferred by a worker, or once a hand-off is done).
    // A remote worker's refusal comes after this returns (see RemoteEngine.check): the server waits for it before a stream starts.
    return { id, stream: h.stream, result, cancel: () => h.cancel(), ...(h.refusal ? { refusal: h.refusal } : {}), get sessionId() { return h.sessionId; } };
  }

  /**
   * Counts a hand-off's prompt as queued on the worker that will prefill it (the prefill worker, or the
   * decoding worker after a peer pull) until its engine has it: without this, every request routed while
   * a first one's KV moved saw that worker idle and went there too. Returns what settles the count.
   */
  private awaitingHandoff(req: GenerateRequest, route: SessionRoute, cands: readonly RouteCandidate[], hop: HandoffHop): () => void {
    const target = this.set.get(route.prefillWorker ?? route.decodeWorker)!;
    const held = (cands.find((c) => c.id === target.id)?.overlapDevice ?? 0) + (route.prefixSource !== undefined ? route.prefixTransferBlocks : 0);
    let tokens = Math.max(0, req.prompt.length - held * this.blockSize);
    target.handoffTokens += tokens;
    const settle = () => {
      target.handoffTokens -= tokens;
      tokens = 0;
    };
    hop.submitted = (w) => w === target && settle();
    return settle;
  }

  /** `submit()`, with a worker's queue-full refusal counted as the cluster's own (vllm:request_rejected_total). */
  private countingRejection(submit: () => RequestHandle): RequestHandle {
    try {
      return submit();
    } catch (e) {
      if (e instanceof EngineOverloadedError) this.window.metrics.rejected++;
      throw e;
    }
  }

  /** Routes over the live workers. `hashes`: the prompt's full-block chain in its cache namespace; `place`: its session's. */
  private route(req: GenerateRequest, hashes: readonly number[], place: SessionPlace): { route: SessionRoute; cands: RouteCandidate[] } {
    const now = this.now();
    const live = this.set.all.filter((w) => w.engine.alive && !w.draining && !w.parked && !w.starting(now) && (req.adapter === undefined || w.adapters.has(req.adapter)));
    if (live.length === 0) throw new NoWorkerError(req.adapter === undefined ? "No worker is running" : `No running worker has loaded the LoRA adapter "${req.adapter}" yet`);
    // A prompt scored whole (prompt log probabilities) takes nothing from any cache: route it as uncached.
    // A model with recurrent state resumes a prefix only from a state checkpoint: a worker's hit reaches
    // only as far as its deepest one within the prompt, however many more of its blocks it holds.
    const overlaps = req.promptLogprobs !== undefined ? new Map<string, never>() : this.set.index.overlaps(hashes, (this.o.stateBytes ?? 0) > 0);
    const cands = live.map((w) => w.candidate(overlaps.get(w.id), req.priority));
    const last = place.lastWorker;
    const sreq = {
      promptTokens: req.prompt.length, blockTokens: this.blockSize, bytesPerBlock: this.o.bytesPerBlock,
      ...(this.o.stateBytes ? { stateBytes: this.o.stateBytes } : {}),
      ...(last !== undefined ? { lastWorker: last } : {}),
      // A session not seen before (a key, or a keyless prompt continuing no kept turn) opens here: its pulls
      // are not charged as moves; unless its messages hold an answer, which makes it a returning one.
      newSession: last === undefined && req.openingTurn !== false,
    };
    const route = routeRequest(this.o.router ?? "session", sreq, cands, this.o.links ?? IN_PROCESS_LINK, this.control.routerOptions);
    this.o.onRoute?.({ ...(req.sessionId !== undefined ? { sessionId: req.sessionId } : {}), request: sreq, candidates: cands, route });
    return { route, cands };
  }
}
