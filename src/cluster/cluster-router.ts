/**
 * Where a cluster sends a request: ours (planner/routers.ts `routeSession`: session affinity against
 * load, prefill hand-off, transfer vs recompute, peer transfer) or Dynamo's KV-aware cost with
 * conditional disaggregation (the simulator's baseline router). Both return a {@link SessionRoute}.
 */
import { type LinkModel, type RouteCandidate, routeKvAware, routeSession, type SessionRequest, type SessionRoute, type SessionRouterOptions } from "../../planner/routers.ts";

/** The routers a cluster can run. */
export const CLUSTER_ROUTERS = ["session", "kv-aware"] as const;
/** One of {@link CLUSTER_ROUTERS}. */
export type ClusterRouterName = typeof CLUSTER_ROUTERS[number];

/** Type guard for a router name from the command line. */
export function isClusterRouter(s: string): s is ClusterRouterName {
  return (CLUSTER_ROUTERS as readonly string[]).includes(s);
}

/**
 * Whether our router may pull a session's cached prefix from the worker holding it (peer transfer):
 * "off"; "device" (the holder's device blocks only); "host" (default: also what it offloaded to
 * host memory, `--kv-offload-blocks`).
 */
export const PEER_TRANSFER_MODES = ["off", "device", "host"] as const;
/** One of {@link PEER_TRANSFER_MODES}. */
export type PeerTransferMode = typeof PEER_TRANSFER_MODES[number];

/** Type guard for a peer-transfer mode from the command line. */
export function isPeerTransferMode(s: string): s is PeerTransferMode {
  return (PEER_TRANSFER_MODES as readonly string[]).includes(s);
}

/** The router options a peer-transfer mode sets (off also drops the memory charge, which only makes sense with moves). */
export function peerTransferOptions(mode: PeerTransferMode): Partial<SessionRouterOptions> {
  if (mode === "off") return { peerTransfer: false, memoryFullS: 0 };
  return { peerTransfer: true, peerHostBlocks: mode === "host" };
}

/**
 * In-process links: a prefix moves by a device read to host memory and a write into the other
 * worker's cache. Assumed 8 GB/s and 0.2 ms per move (a PCIe-class host round trip), not measured.
 */
export const IN_PROCESS_LINK: LinkModel = { bandwidth: () => 8e9, latency: () => 2e-4, hostBandwidth: 8e9 };

/** Routes one request over the candidates; prefill-role workers only take prefills to hand on. */
export function routeRequest(
  name: ClusterRouterName, req: SessionRequest, cands: readonly RouteCandidate[], links: LinkModel, o: SessionRouterOptions,
  overlapWeight = 1,
): SessionRoute {
  let decoders = cands.filter((c) => c.role !== "prefill");
  let prefillers = cands.filter((c) => c.role === "prefill");
  // With no worker left to decode (the last one flipped, died or left), every engine still runs whole
  // requests: the prefill-role ones serve as mixed workers rather than refuse every request, and none
  // hands a prefill to another (nor to itself).
  if (decoders.length === 0) {
    decoders = cands.map((c) => ({ ...c, role: "mixed" }));
    prefillers = [];
  }
  if (name === "session") {
    const r = routeSession(req, decoders, prefillers, links, o);
    if (r !== undefined) return r;
  }
  const blocks = Math.ceil(req.promptTokens / req.blockTokens);
  const dec = routeKvAware(decoders, blocks, req.blockTokens, overlapWeight) ?? decoders[0];
  const uncached = req.promptTokens - dec.overlapDevice * req.blockTokens;
  // Dynamo's conditional disaggregation: remote prefill only for long uncached prompts.
  const pre = dec.role === "decode" && uncached > o.localPrefillThreshold ? routeKvAware(prefillers, blocks, req.blockTokens, overlapWeight) : undefined;
  return { decodeWorker: dec.id, prefillWorker: pre?.id ?? null, prefixTransferBlocks: 0, predictedTtftS: 0 };
}

/** Our router's tunables `--router-options` may set: seconds or weights (numbers ≥ 0), and switches. */
const NUMERIC_ROUTER_OPTIONS = [
  "itlTargetS", "loadWeightS", "affinityBonusS", "batchWeightS", "prefillShortlist", "interferenceWeight", "memoryWaitS", "memoryFullS", "peerMoveS", "sessionSpreadS",
] as const satisfies readonly (keyof SessionRouterOptions)[];
const BOOLEAN_ROUTER_OPTIONS = ["waiveOpeningPulls"] as const satisfies readonly (keyof SessionRouterOptions)[];

/** A `--router-options` value the router cannot take. */
export class RouterOptionsError extends Error {
  override name = "RouterOptionsError";
}

/**
 * Parses `--router-options` ("sessionSpreadS=0.05,waiveOpeningPulls=true"): our router's tunables
 * (planner/routers.ts `SessionRouterOptions`) over the cluster's defaults. Throws RouterOptionsError
 * naming the bad pair. Peer transfer and the local-prefill threshold have flags of their own.
 */
export function parseRouterOptions(text: string): Partial<SessionRouterOptions> {
  const out: Record<string, number | boolean> = {};
  for (const pair of text.split(",")) {
    const eq = pair.indexOf("=");
    const key = pair.slice(0, eq).trim();
    const value = pair.slice(eq + 1).trim();
    if (eq < 0 || key === "" || value === "") throw new RouterOptionsError(`Router option "${pair}" is not NAME=VALUE`);
    if ((NUMERIC_ROUTER_OPTIONS as readonly string[]).includes(key)) {
      const n = Number(value);
      // The shortlist is a count of prefill workers; the ITL target divides.
      const need = key === "prefillShortlist" ? "a whole number ≥ 1" : key === "itlTargetS" ? "a positive number" : "a non-negative number";
      const ok = Number.isFinite(n) && (key === "prefillShortlist" ? Number.isInteger(n) && n >= 1 : key === "itlTargetS" ? n > 0 : n >= 0);
      if (!ok) throw new RouterOptionsError(`Router option ${key} needs ${need}, got "${value}"`);
      out[key] = n;
    } else if ((BOOLEAN_ROUTER_OPTIONS as readonly string[]).includes(key)) {
      if (value !== "true" && value !== "false") throw new RouterOptionsError(`Router option ${key} takes true or false, got "${value}"`);
      out[key] = value === "true";
    } else {
      throw new RouterOptionsError(`Unknown router option "${key}"; choose from ${[...NUMERIC_ROUTER_OPTIONS, ...BOOLEAN_ROUTER_OPTIONS].join(", ")}`);
    }
  }
  return out as Partial<SessionRouterOptions>;
}
