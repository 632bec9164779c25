/**
 * The systems compared: three Dynamo-like baseline variants and ours. A system is configuration
 * plus the pure planner/ and kv/ objects it runs; the simulator treats them all alike.
 */
import { AgentAwarePolicy } from "../../kv/agent-retention.ts";
import { LruPolicy, type RetentionPolicy } from "../../kv/retention.ts";
import type { SessionTracker } from "../../kv/session-tracker.ts";
import { LoadPlanner } from "../../planner/load-planner.ts";
import { OnlinePlanner, type OnlinePlannerOptions } from "../../planner/online-planner.ts";
import { type OfflineProfile, profileSplitsSteps } from "../../planner/profile.ts";
import { SlaProfilePlanner } from "../../planner/sla-profile-planner.ts";
import { AGED_SHORT_FIRST, type PrefillOrderOptions } from "../../planner/prefill-order.ts";
import type { Planner } from "../../planner/types.ts";

/** How requests are placed. */
export type SystemMode = "disagg" | "agg" | "evolving";

/** One system under test. */
export interface SystemSpec {
  name: string;
  mode: SystemMode;
  planner: Planner | null;
  makePolicy: (sessions: SessionTracker) => RetentionPolicy;
  hostTier: boolean;
  /** Decode workers register the KV they receive and generate (prefix reuse on the next turn). */
  decodeCaches: boolean;
  initialPrefill: number;
  initialDecode: number;
  /** Role of the initial workers that do not prefill. */
  initialRole: "decode" | "mixed";
  /** Seconds before a newly started worker serves (model load). */
  startupS: number;
  /** Conditional disaggregation: prefill locally when the uncached prompt is at most this. */
  maxLocalPrefill: number;
  /** ... or when this many requests per prefill worker are already queued for remote prefill. */
  maxPrefillQueuePerWorker: number;
  /** Ours: weight of the stall a local prefill causes to a worker's decode batch (router default when absent). */
  stallWeight?: number;
  /** Ours: seconds per turn already waiting for KV memory on a worker (router's memoryWaitS; off when absent). */
  memoryWaitS?: number;
  /** Ours: pull a session's prefix from the worker holding it (router option peerTransfer). */
  peerTransfer?: boolean;
  /** Ours: seconds a move must gain, and seconds charged where the turn would wait for KV memory (router options). */
  peerMoveS?: number;
  memoryFullS?: number;
  /** Ours: a peer pull also takes the holder's host-memory blocks (router option peerHostBlocks). */
  peerHostBlocks?: boolean;
  /** Ours: seconds a new session is charged per live session homed on a worker (router option sessionSpreadS; off when absent). */
  sessionSpreadS?: number;
  /** Ours: never charge a new session's pulls (router option waiveOpeningPulls). */
  waiveOpeningPulls?: boolean;
  /** Ours: tell the holder's retention policy that a session moved away with its prefix (its copy goes first). */
  demoteMovedSessions?: boolean;
  /**
   * Ours: prefetch a tool-waiting session's host-tier KV back to the device this many seconds (plus the
   * copy's own time) before its predicted return (src/sim/prefetch.ts); absent: fetch on arrival.
   */
  prefetchLeadS?: number;
  /** How a worker orders its queued prefills (FCFS when absent, as vLLM and SGLang do by default). */
  prefillOrder?: PrefillOrderOptions;
  /**
   * Whether workers start mixing prefill chunks with decodes in one step (default "mixed", vLLM's
   * chunked prefill) or run them as separate steps ("split", SGLang's default). Ours' planner may
   * change it at run time.
   */
  stepMixing?: "mixed" | "split";
  /**
   * Tokens of a step's budget (prompt chunks plus decoding sequences): on mixed and decode workers
   * (default 8192) and on prefill workers (default 16384). A real engine's `--max-batch-tokens`.
   */
  stepTokens?: { mixed: number; prefill: number };
  /** Dynamo KV-router overlap_weight (baselines; default 1, Dynamo's default). */
  overlapWeight?: number;
  /**
   * Dynamo's request rejection (load shedding; off by default there and here): a worker is busy when
   * more than `activeBlocks` of its KV blocks are held by requests or more than `prefillTokens`
   * prompt tokens wait for its prefill; while every serving worker is busy, requests are turned away
   * ("all-workers-busy", HTTP 503 there).
   */
  busyThresholds?: { activeBlocks?: number; prefillTokens?: number };
  /** Stated parameters, for reports. */
  params: Record<string, string | number | boolean>;
}

/** Shared settings every system gets. */
export interface SystemContext {
  workers: number;
  profile: OfflineProfile;
  initialSplit: { prefill: number; decode: number };
  ttftTargetS: number;
  itlTargetS: number;
  startupS: number;
  /** Ours' ITL admission at this fixed fraction of the ITL target (absent: the measured aim). */
  itlAim?: number;
}

/** Dynamo disaggregated serving with the SLA planner in throughput mode (180 s). */
export function baselineDisaggSla(c: SystemContext): SystemSpec {
  const planner = new SlaProfilePlanner({
    profile: c.profile, maxWorkers: c.workers, intervalS: 180, ttftTargetS: c.ttftTargetS, itlTargetS: c.itlTargetS,
    startupDelayS: 30, predictor: "constant",
  });
  return {
    name: "dynamo-disagg-sla", mode: "disagg", planner, makePolicy: () => new LruPolicy(), hostTier: true,
    decodeCaches: false, initialPrefill: c.initialSplit.prefill, initialDecode: c.initialSplit.decode, initialRole: "decode",
    startupS: c.startupS, maxLocalPrefill: 1000, maxPrefillQueuePerWorker: 2,
    params: {
      planner: "SLA throughput mode", interval_s: 180, predictor: "constant", ttft_target_s: c.ttftTargetS,
      itl_target_s: c.itlTargetS, planner_startup_delay_s: 30, worker_startup_s: c.startupS, max_workers: c.workers,
      initial_prefill: c.initialSplit.prefill, initial_decode: c.initialSplit.decode, router: "kv-aware overlap_weight=1 temperature=0",
      retention: "LRU + host tier (LRU, offload on evict)", max_local_prefill_tokens: 1000, max_prefill_queue_per_worker: 2,
      decode_kv_reuse: false, profile: `offline sweep, ISL ${c.profile.profiledIsl}/OSL ${c.profile.profiledOsl} centre`,
    },
  };
}

/** Dynamo disaggregated serving with the load-mode planner (5 s, ±1 replica). */
export function baselineDisaggLoad(c: SystemContext): SystemSpec {
  const s = baselineDisaggSla(c);
  const planner = new LoadPlanner({ profile: c.profile, maxWorkers: c.workers, intervalS: 5, ttftTargetS: c.ttftTargetS, itlTargetS: c.itlTargetS });
  return { ...s, name: "dynamo-disagg-load", planner, params: { ...s.params, planner: "load mode (5 s, ±1 replica, scale-down guard 0.8)", interval_s: 5 } };
}

/** Dynamo aggregated serving: every worker prefills and decodes, KV-aware router, no planner. */
export function baselineAgg(c: SystemContext): SystemSpec {
  return {
    name: "dynamo-agg", mode: "agg", planner: null, makePolicy: () => new LruPolicy(), hostTier: true,
    decodeCaches: true, initialPrefill: 0, initialDecode: c.workers, initialRole: "mixed", startupS: c.startupS,
    maxLocalPrefill: Infinity, maxPrefillQueuePerWorker: 0,
    params: {
      planner: "none (aggregated, all workers mixed)", router: "kv-aware overlap_weight=1 temperature=0 (agentic preset: decode KV reused)",
      retention: "LRU + host tier (LRU, offload on evict)", workers: c.workers, chunked_prefill_budget: 8192,
    },
  };
}

/**
 * Dynamo aggregated serving with the KV router tuned: overlap_weight 64 instead of the default 1, so
 * cache hits outweigh load (Dynamo's --kv-overlap-score-weight). Chosen by an offline sweep of
 * {1, 2, 4, 8, 16, 64, 256} on 600 s runs of coding (loads 1 and 3), computer-use (0.25 and 1) and
 * mixed-shift (2): goodput rose up to 64 everywhere and fell at 256. Its best settings, as DESIGN.md asks.
 * It also gets our prefill queue order (`AGED_SHORT_FIRST`, planner/prefill-order.ts): it cut this baseline's P95 TTFT by
 * 5–9% at ±1% goodput, as much as ours, so leaving it FCFS would credit ours with an engine setting.
 */
export function baselineAggTuned(c: SystemContext): SystemSpec {
  const s = baselineAgg(c);
  // The operator reads the offline profile: mixed steps dearer than separate ones → an engine that
  // does not mix them (SGLang's default), else chunked prefill mixed with decodes (vLLM's).
  const split = profileSplitsSteps(c.profile);
  return {
    ...s, name: "dynamo-agg-tuned", overlapWeight: 64, prefillOrder: AGED_SHORT_FIRST, stepMixing: split ? "split" : "mixed",
    params: {
      ...s.params, router: "kv-aware overlap_weight=64 (tuned offline) temperature=0, decode KV reused",
      prefill_order: "short-first, aged 2000 tokens/s (ours, given to it too; SGLang's lpm policy is the nearest deployable setting)",
      step_mixing: split
        ? "separate prefill and decode steps (the offline profile prices mixed steps above separate ones)"
        : "chunked prefill mixed with decodes (the offline profile prices mixed steps at most as separate ones)",
    },
  };
}

/**
 * The tuned baseline with Dynamo's request rejection (load shedding) on, at the thresholds its
 * documentation shows (`--active-decode-blocks-threshold 0.85 --active-prefill-tokens-threshold
 * 10000`; off by default in Dynamo): while every worker is over one, requests get HTTP 503.
 */
export function baselineAggShed(c: SystemContext): SystemSpec {
  const s = baselineAggTuned(c);
  return {
    ...s, name: "dynamo-agg-shed", busyThresholds: { activeBlocks: 0.85, prefillTokens: 10_000 },
    params: {
      ...s.params,
      request_rejection: "on: a worker is busy with > 85% of its KV blocks held by requests or > 10,000 prompt tokens waiting for its prefill; while all are busy, requests are turned away (Dynamo's documented example thresholds)",
    },
  };
}

/**
 * Ours' planner settings in the simulator: the SLO targets, and new sessions let in within the ITL
 * target (planner/itl-admission.ts; off in the OnlinePlanner itself, whose server default has no
 * target a laptop's engine would meet).
 */
export function oursPlannerOptions(c: SystemContext): OnlinePlannerOptions {
  return { ttftTargetS: c.ttftTargetS, itlTargetS: c.itlTargetS, itlAdmission: c.itlAim === undefined ? true : { aim: c.itlAim } };
}

/** Ours: online planner flipping roles, agent-aware KV, session router with transfer-vs-recompute. */
export function evolving(c: SystemContext): SystemSpec {
  const planner = new OnlinePlanner(oursPlannerOptions(c));
  return {
    name: "evolving", mode: "evolving", planner, makePolicy: (s) => new AgentAwarePolicy(s), hostTier: true,
    // No offline profile to pick a split from: start in the most general role (every worker prefills
    // and decodes, like aggregated serving) and let measurements specialise workers.
    decodeCaches: true, initialPrefill: 0, initialDecode: c.workers, initialRole: "mixed", startupS: 0,
    maxLocalPrefill: planner.localPrefillThreshold(), maxPrefillQueuePerWorker: Infinity, prefillOrder: AGED_SHORT_FIRST,
    // A worker lacking the session's prefix may pull it from the holder; a move must gain 0.5 s, and
    // a worker without KV memory for the turn counts 1 s more (sixth session: 0.2/0.5/1 s and 0/1/3 s
    // measured on three seeds, docs/results/variants/peer-transfer.txt).
    peerTransfer: true, peerMoveS: 0.5, memoryFullS: 1,
    // The holder sends what it offloaded to host memory too (ninth session: with KV replicated, P95 TTFT
    // 2.1x better over 12 runs, goodput 0.98x; default cost model unchanged; docs/results/variants/peer-host.txt).
    peerHostBlocks: true,
    params: {
      planner: "online (1 s tick, roles prefill/decode/mixed, hysteresis 10%, confirm 2 ticks, cooldown 15 s, ≤6.25% of workers flipped per tick)",
      router: "session affinity vs load, transfer vs recompute (to a prefill worker, or from the prefix's holder, device and host memory, to another worker: a move must gain 0.5 s; 1 s charged where the turn would wait for KV memory)", retention: "agent-aware benefit/byte + host tier",
      decode_kv_reuse: true, workers: c.workers, initial_roles: "all mixed", prefill_order: "short-first, aged 2000 tokens/s",
      step_mixing: "starts mixed; the planner separates prefill and decode steps when its fitted step model prices mixed steps 20% above separate ones",
      admission: `new sessions let in each tick only while the decode pool's ITL (step model scaled to the measured one) stays below ${c.itlAim === undefined ? "mean/P90 of recent requests' ITL" : `${c.itlAim} (--itl-aim)`} × the ITL target, the pool priced as its sessions will be (steps at the highest prefill and decode contexts of the last 10 min, or while they rise where their 10 s trend takes them 60 s ahead once the measured ITL reaches half the aim, each extra session bringing the prefill tokens/s a held one brings); the others wait to the next tick, then are turned away (reason overloaded); turns of sessions already in are never refused`,
    },
  };
}

/**
 * Ablation, not a baseline: ours with the planner switched off, so roles stay all mixed. The gap to
 * {@link evolving} is what the online role planner adds on top of our router and KV manager.
 */
export function evolvingStatic(c: SystemContext): SystemSpec {
  const s = evolving(c);
  return { ...s, name: "evolving-static", planner: null, params: { ...s.params, planner: "none (ablation: roles stay all mixed)", step_mixing: "always mixed (no planner)" } };
}
