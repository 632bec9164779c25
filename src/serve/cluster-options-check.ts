/**
 * The checks `startServer` makes of a server's cluster options before it loads anything: which
 * combinations of workers, transport, roles, NATS and planner go together. Each refusal is a
 * RangeError naming the flags, as the serve CLI prints it.
 */
import type { ServerOptions } from "./server.ts";
import { type ModelConfig, recurrentKind } from "../model/config.ts";
import { isProfilePlanner } from "./sla-planner-setup.ts";

/**
 * Throws a RangeError for cluster options that do not go together; returns the fixed worker count (0
 * under NATS, where workers join later) and the transport the workers use.
 */
export function checkClusterOptions(o: ServerOptions): { workers: number; transport: ServerOptions["transport"] } {
  if (o.nats !== undefined && o.transport !== undefined && o.transport !== "tcp") throw new RangeError(`--nats needs --transport tcp (worker processes), not ${o.transport}`);
  if (o.nats !== undefined && o.workerAddrs !== undefined) throw new RangeError("--nats and --worker-addrs do not go together: with --nats, workers announce their own addresses");
  if (o.nats !== undefined && o.roles !== undefined) throw new RangeError("--roles needs a fixed worker set; with --nats, workers join as mixed and the planner sets their roles");
  if (o.workerToken !== undefined && o.nats === undefined && o.transport !== "tcp") throw new RangeError("A worker token is for worker processes (--transport tcp or --nats)");
  if (o.nats === undefined && o.clusterName !== undefined) throw new RangeError(`--cluster-name ${o.clusterName} needs --nats`);
  const transport = o.nats !== undefined ? "tcp" : o.transport;
  if (transport === "tcp" && !(o.workerAddrs?.length) && o.nats === undefined) throw new RangeError("--transport tcp needs --worker-addrs host:port,... or --nats URL");
  if (o.workerAddrs !== undefined && o.transport !== "tcp") throw new RangeError("--worker-addrs needs --transport tcp");
  if (o.workerAddrs !== undefined && o.workers !== undefined && o.workers !== o.workerAddrs.length) {
    throw new RangeError(`--workers ${o.workers} does not match the ${o.workerAddrs.length} addresses of --worker-addrs`);
  }
  const workers = o.nats !== undefined ? 0 : o.workerAddrs?.length ?? o.workers ?? 1;
  if (o.roles !== undefined && o.roles.length !== workers) throw new RangeError(`--roles names ${o.roles.length} roles for ${workers} workers`);
  if (workers > 1 && o.role !== undefined) throw new RangeError(`--role ${o.role} sets one engine's role; with --workers ${workers} use --roles`);
  if (o.plannerLogPath !== undefined && !(workers > 1 || transport === "tcp")) {
    throw new RangeError(`--planner-log "${o.plannerLogPath}" needs --workers: one engine has no planner`);
  }
  if (o.routeLogPath !== undefined && !(workers > 1 || transport === "tcp")) {
    throw new RangeError(`--route-log "${o.routeLogPath}" needs --workers: one engine has no router`);
  }
  const profiled = isProfilePlanner(o.planner);
  if (profiled && workers < 2 && o.nats === undefined) throw new RangeError(`--planner ${o.planner} needs at least 2 workers (a prefill and a decode pool), got ${workers}`);
  // Under NATS no worker is there to profile at start-up: the profile is taken beforehand, as Dynamo's is.
  if (profiled && o.nats !== undefined && o.sla?.profilePath === undefined) {
    throw new RangeError(`--planner ${o.planner} with --nats reads its offline profile from --sla-profile FILE: no worker is there to measure at start-up (a server with --workers 2 --planner ${o.planner} --sla-profile FILE writes one)`);
  }
  if (o.sla !== undefined && !profiled) throw new RangeError("The SLA planner's settings (--sla-*) need --planner sla or load");
  if (profiled && o.itlAdmissionTargetS !== undefined) throw new RangeError("--itl-admission-ms is the online planner's; the SLA planner admits every request");
  // With several workers "auto" (their default) is the planner's to decide, for the whole cluster; an
  // engine's own "auto" would fight it. "mixed" or "split" given for them is kept: the planner leaves it.
  if ((workers > 1 || transport === "tcp") && o.stepMixing === "auto" && (o.planner === "none" || profiled)) {
    throw new RangeError(`--step-mixing auto with --workers is the online planner's to decide, and --planner ${o.planner} decides none: choose mixed or split`);
  }
  return { workers, transport };
}

/**
 * A cluster's settings for a model with recurrent state (Gated DeltaNet or short convolution layers), or a RangeError naming the flag that
 * cannot go with one. Each sequence's recurrent state lives in a slot of the worker running it, and a
 * prefix's only in that worker's state checkpoints: nothing may hand a sequence to another worker (a
 * prefill worker's hand-off, the planners' role flips and pools) or pull a cached prefix from a peer
 * (its blocks would come without the state, so the pull would buy nothing). The workers stay mixed, the
 * planner none, peer transfer off; an agent's session keeps to the worker holding its checkpoints by
 * the router's session affinity.
 */
export function recurrentClusterOptions(o: ServerOptions, config: ModelConfig): { planner: "none"; peerTransfer: "off" } {
  const why = `a model with ${recurrentKind(config)} (${config.architecture}) keeps each sequence's recurrent state on the worker running it`;
  const planner = typeof o.planner === "object" ? "(a planner object)" : o.planner;
  if (planner !== undefined && planner !== "none") {
    throw new RangeError(`--planner ${planner} moves sequences between prefill and decode workers, and ${why}: serve it with --planner none (its default for such a model)`);
  }
  const role = o.roles?.find((r) => r !== "mixed");
  if (role !== undefined) throw new RangeError(`--roles ${o.roles!.join(",")} gives a worker the "${role}" role, whose sequences are handed on, and ${why}: its workers are all mixed`);
  if (o.peerTransfer !== undefined && o.peerTransfer !== "off") {
    throw new RangeError(`--peer-transfer ${o.peerTransfer} pulls cached prefixes from other workers without their recurrent state, and ${why}: serve it with --peer-transfer off (its default for such a model)`);
  }
  if (o.itlAdmissionTargetS !== undefined) throw new RangeError(`--itl-admission-ms is the online planner's, and ${why}: the planner is none`);
  return { planner: "none", peerTransfer: "off" };
}
