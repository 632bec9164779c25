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
