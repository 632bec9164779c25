/**
 * `worker`: one engine for a cluster on another machine (or process). Listens on a TCP port; a
 * server started with `--transport tcp --worker-addrs host:port,...` connects, tells it which model
 * (a path on this machine) and backend to load, and drives it over the cluster protocol
 * (src/cluster/worker-host.ts). Each connection gets its own engine; it ends with the connection.
 *
 *   deno task worker --listen 127.0.0.1:9001
 */
import net from "node:net";
import { socketPort } from "../cluster/tcp-port.ts";
import { serveWorker } from "../cluster/worker-host.ts";
import { parseAddress } from "../cluster/create-cluster.ts";
import { cliArgs, exitProcess } from "../runtime/env.ts";
import { ArgsError, type FlagSpecs, parseArgs, usage } from "./args.ts";

const FLAGS = {
  listen: { kind: "string", help: "host:port to accept the cluster's connection on (port 0 picks a free one; default 127.0.0.1:9001)" },
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
    throw new ArgsError((e as Error).message);
  }
  const server = net.createServer((socket) => serveWorker(socketPort(socket)));
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(addr.port, addr.host, () => resolve());
  });
  const bound = server.address() as net.AddressInfo;
  console.error(`worker: listening on ${addr.host.includes(":") ? `[${addr.host}]` : addr.host}:${bound.port}`);
}

main().catch((e: unknown) => {
  const known = e instanceof ArgsError || (e instanceof Error && "code" in e);
  console.error(known ? `worker: ${(e as Error).message}` : `worker: unexpected error: ${e instanceof Error ? e.stack : String(e)}`);
  exitProcess(known ? 2 : 1);
});
