/**
 * The checks `startServer` makes of a server's cluster options before it loads anything: which
 * combinations of workers, transport, roles, NATS and planner go together. Each refusal is a
 * RangeError naming the flags, as the serve CLI prints it.
 */
import type { ServerOptions } from "./server.ts";
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
