/**
 * `worker`: one engine for a cluster on another machine (or process). Listens on a TCP port; a
 * server started with `--transport tcp --worker-addrs host:port,...` connects, tells it which model
 * (a path on this machine) and backend to load, and drives it over the cluster protocol
 * (src/cluster/worker-host.ts). Each connection gets its own engine; it ends with the connection.
 * With `--nats URL` it also announces itself there, so a server started with `--nats URL` finds it
 * (src/cluster/nats-membership.ts); on SIGINT or SIGTERM it announces that it is leaving, lets the
 * server drain and stop it, and exits.
 *
 *   deno task worker --listen 127.0.0.1:9001
 *   deno task worker --listen 0.0.0.0:9001 --nats nats://10.0.0.5:4222 --advertise 10.0.0.7:9001
 */
import net from "node:net";
import os from "node:os";
import { ControlPlaneError, controlSubjects, splitCredentials } from "../cluster/nats-membership.ts";
import { announceWorkerInThread } from "../cluster/nats-announcer.ts";
import { socketPort } from "../cluster/tcp-port.ts";
import { serveWorker } from "../cluster/worker-host.ts";
import { parseAddress } from "../cluster/create-cluster.ts";
import { cliArgs, envVar, exitProcess, onShutdownSignal } from "../runtime/env.ts";
import { greetServer } from "../cluster/worker-auth.ts";
import { ArgsError, type FlagSpecs, parseArgs, usage } from "./args.ts";

const FLAGS = {
  listen: { kind: "string", nonEmpty: true, help: "host:port to accept the cluster's connection on (port 0 picks a free one; default 127.0.0.1:9001)" },
  nats: { kind: "string", nonEmpty: true, help: "NATS server (host:port or nats://host:port) to announce this worker on, for a server started with --nats" },
  "cluster-name": { kind: "string", nonEmpty: true, help: "the cluster to join on that NATS server (default \"default\"; with --nats)" },
  id: { kind: "string", nonEmpty: true, help: "this worker's name in the cluster (default HOSTNAME-PORT; with --nats)" },
  advertise: { kind: "string", nonEmpty: true, help: "host:port servers connect to (default: the listening address, or this machine's name when listening on all interfaces; with --nats)" },
  "drain-timeout": { kind: "number", min: 0, help: "seconds to wait, after announcing that it leaves, for the server to stop this worker's engines before exiting (default 90; with --nats)" },
  "worker-token": { kind: "string", nonEmpty: true, help: "shared secret: serve only a server started with the same token (each side proves it knows it; default: $EVOLVING_WORKER_TOKEN, else any server)" },
  help: { kind: "boolean", help: "show this help" },
} satisfies FlagSpecs;

async function main(): Promise<void> {
  const f = parseArgs(cliArgs(), FLAGS);
  if (f.help) return void console.log(usage("worker", FLAGS));
  const listen = f.listen ?? "127.0.0.1:9001";
  let addr: { host: string; port: number };
  try {
    addr = parseAddress(listen, 0);
  } catch (e) {
    throw new ArgsError(`Flag --listen: ${(e as Error).message}`);
  }
  for (const flag of ["cluster-name", "id", "advertise", "drain-timeout"] as const) {
    if (f[flag] !== undefined && f.nats === undefined) throw new ArgsError(`Flag --${flag} ${f[flag]} needs --nats`);
  }
  const clusterName = f["cluster-name"] ?? "default";
  if (f.nats !== undefined) {
    try {
      controlSubjects(clusterName);
    } catch (e) {
      throw new ArgsError((e as Error).message);
    }
    try {
      if (f.advertise !== undefined) parseAddress(f.advertise);
    } catch (e) {
      throw new ArgsError(`Flag --advertise: ${(e as Error).message}`);
    }
  }
  const envToken = envVar("EVOLVING_WORKER_TOKEN");
  const token = f["worker-token"] ?? (envToken === "" ? undefined : envToken);
  let open = 0;
  const server = net.createServer((socket) => {
    open++;
    socket.on("close", () => open--);
    // Read now: once the socket has closed (a peer that hangs up mid-greeting) it is undefined.
    const from = `${(socket.remoteAddress ?? "").includes(":") ? `[${socket.remoteAddress}]` : socket.remoteAddress}:${socket.remotePort}`;
    // Until the server has greeted, frames are small: a stranger cannot make this worker buffer much.
    const port = socketPort(socket, 64 * 1024);
    greetServer(port, token).then(() => {
      port.setMaxFrameBytes(0xffffffff);
      serveWorker(port);
    }, (e: Error) => {
      console.error(`worker: refused a connection from ${from}: ${e.message}`);
      void port.close();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(addr.port, addr.host, () => resolve());
  }).catch((e: Error) => {
    throw new ArgsError(`Cannot listen on ${listen} (--listen): ${e.message}`);
  });
  const bound = server.address() as net.AddressInfo;
  const bracket = (h: string) => (h.includes(":") ? `[${h}]` : h);
  console.error(`worker: listening on ${bracket(addr.host)}:${bound.port}${token === undefined ? "" : " (worker token required)"}`);
  if (f.nats === undefined) return;
  const anyHost = addr.host === "0.0.0.0" || addr.host === "::";
  const advertise = f.advertise ?? `${bracket(anyHost ? os.hostname() : addr.host)}:${bound.port}`;
  const id = f.id ?? `${os.hostname()}-${bound.port}`;
  // From a thread: the NATS client never loads in this isolate, where the engines run (nats-announcer.ts).
  const announcer = await announceWorkerInThread(f.nats, `evolving-worker ${id}`, clusterName, { id, addr: advertise }, {
    onLost: (e) => console.error(`worker: stopped announcing on NATS (${e.message}); servers keep this worker until its connection fails, but new servers will not find it`),
  });
  console.error(`worker: announced as "${id}" at ${advertise} on cluster "${clusterName}" (NATS ${splitCredentials(f.nats).server})`);
  let leaving = false;
  const leave = async () => {
    if (leaving) return exitProcess(1); // a second signal: stop now
    leaving = true;
    console.error(`worker: leaving; waiting for the server to drain ${open} connection${open === 1 ? "" : "s"}`);
    await announcer.leave().catch(() => {});
    const deadline = Date.now() + (f["drain-timeout"] ?? 90) * 1000;
    while (open > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await announcer.close();
    server.close();
    exitProcess(open > 0 ? 1 : 0);
  };
  onShutdownSignal(() => void leave());
}

main().catch((e: unknown) => {
  const known = e instanceof ArgsError || e instanceof ControlPlaneError || (e instanceof Error && "code" in e);
  console.error(known ? `worker: ${(e as Error).message}` : `worker: unexpected error: ${e instanceof Error ? e.stack : String(e)}`);
  exitProcess(known ? 2 : 1);
});
