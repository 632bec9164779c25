/**
 * A Node worker process end to end, joined through NATS (`worker --nats`) against one joined over TCP
 * (`worker --listen` with `serve --transport tcp`): starts a real `nats-server` (scripts/setup.sh),
 * one worker under Node with V8's `--trace-protector-invalidation` (reference backend, the
 * bench-agent-kv scripted model) and a server under Deno that drives it, sends the same chat requests
 * one at a time, and prints the median latency of the first request and of the rest, and the protector
 * invalidations the worker printed (one is tsx's loader thread at start; more means the worker's own
 * isolate detached a buffer, which slows its CPU kernels for good: docs/results/bench-detach.md).
 * Transports (and checkouts, with `--roots`) alternate between rounds. Figures: docs/results/bench-detach.md.
 *
 *   npx tsx scripts/bench-worker-nats.ts [--roots ../before,.] [--transports nats,tcp] [--requests 20] [--chars 1000] [--rounds 2]
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { resolve } from "node:path";
import { parseArgs } from "../src/cli/args.ts";
import { cliArgs, exitProcess } from "../src/runtime/env.ts";
import { agentModel, ENDING } from "./bench-agent-kv/agent-model.ts";
import { words } from "./bench-agent-kv/workload.ts";
import { timeChats } from "./bench-serve/chat-timing.ts";
import { seededRandom } from "./bench-serve/workload.ts";

const INVALIDATED = "Invalidating protector cell ArrayBufferDetaching";
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

type Transport = "nats" | "tcp";

interface Run {
  ms: number[];
  /** The worker's invalidations before its first request, and after. */
  atStart: number;
  whileServing: number;
}

/** Starts `cmd args`; resolves with the child, its logs so far, and the first match of `pattern` in its stderr. */
function startUntil(cmd: string, args: string[], cwd: string, pattern: RegExp, what: string): Promise<{ child: ChildProcess; match: RegExpExecArray; out: () => string }> {
  const child = spawn(cmd, args, { cwd, env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "" }, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (d: Buffer) => (stdout += d.toString()));
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`${what} did not start within 120 s: ${stderr}`)), 120_000);
    child.stderr!.on("data", (d: Buffer) => {
      stderr += d.toString();
      const m = pattern.exec(stderr);
      if (m) {
        clearTimeout(timer);
        ok({ child, match: m, out: () => stdout });
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      fail(new Error(`${what} exited with ${code}: ${stderr}`));
    });
  });
}

function startNats(): Promise<{ url: string; child: ChildProcess }> {
  const bin = ["/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"].find((p) => existsSync(p)) ?? "nats-server";
  return startUntil(bin, ["-a", "127.0.0.1", "-p", "-1"], ".", /Listening for client connections on (\S+)/, "nats-server")
    .then(({ child, match }) => ({ url: `nats://${match[1]}`, child }));
}

async function runOnce(root: string, transport: Transport, natsUrl: string, cluster: string, model: string, prompts: readonly string[]): Promise<Run> {
  const workerArgs = ["--trace-protector-invalidation", "--import", "tsx", `${root}/src/cli/worker.ts`, "--listen", "127.0.0.1:0"];
  if (transport === "nats") workerArgs.push("--nats", natsUrl, "--cluster-name", cluster, "--id", "w1");
  const worker = await startUntil("node", workerArgs, root, transport === "nats" ? /announced as/ : /listening on (\S+)/, `worker from ${root}`);
  const serveArgs = ["run", "-A", "--no-check", `${root}/src/cli/serve.ts`, "--model", model, "--port", "0", "--backend", "reference", "--kv-blocks", "2048"];
  serveArgs.push(...(transport === "nats" ? ["--nats", natsUrl, "--cluster-name", cluster] : ["--transport", "tcp", "--worker-addrs", worker.match[1]]));
  let server: ChildProcess | undefined;
  try {
    const s = await startUntil(`${root}/node_modules/deno/deno`, serveArgs, root, /listening on (http:\/\/\S+)/, `serve from ${root}`);
    server = s.child;
    const url = s.match[1];
    // Through NATS the worker joins once the server has heard it: wait until the server can serve.
    for (let i = 0; (await fetch(`${url}/health`)).status !== 200; i++) {
      if (i > 600) throw new Error(`serve from ${root} never had a worker`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const count = () => worker.out().split(INVALIDATED).length - 1;
    const atStart = count();
    const ms = await timeChats(url, prompts, `serve from ${root}`);
    return { ms, atStart, whileServing: count() - atStart };
  } finally {
    server?.kill("SIGKILL");
    worker.child.kill("SIGKILL");
  }
}

async function main(): Promise<void> {
  const f = parseArgs(cliArgs(), {
    roots: { kind: "string", help: "checkouts to start the worker and server from, comma-separated (default .)" },
    transports: { kind: "string", help: "nats, tcp or both, comma-separated (default nats,tcp)" },
    requests: { kind: "int", min: 2, help: "chat requests per run (default 20)" },
    chars: { kind: "int", min: 10, help: "characters of each prompt (default 1000)" },
    rounds: { kind: "int", min: 1, help: "runs of each checkout and transport, order alternated (default 2)" },
  });
  const roots = (f.roots ?? ".").split(",").map((r) => resolve(r));
  const transports = (f.transports ?? "nats,tcp").split(",").map((t) => t.trim());
  const bad = transports.find((t) => t !== "nats" && t !== "tcp");
  if (bad !== undefined) throw new Error(`Unknown transport "${bad}" in --transports; choose nats or tcp`);
  const targets = roots.flatMap((root) => transports.map((transport) => ({ root, transport: transport as Transport })));
  const label = (t: { root: string; transport: Transport }) => `${t.root} worker --${t.transport === "nats" ? "nats" : "listen (tcp)"}`;
  const rnd = seededRandom(5);
  const prompts = Array.from({ length: f.requests ?? 20 }, (_, i) => `task ${i} ${words(rnd, f.chars ?? 1000)}${ENDING.final}`);
  const dir = mkdtempSync(`${tmpdir()}/bench-worker-nats-`);
  const nats = await startNats();
  try {
    const model = `${dir}/agent-scripted.gguf`;
    await agentModel(model);
    const runs = new Map<string, Run[]>(targets.map((t) => [label(t), []]));
    for (let round = 0; round < (f.rounds ?? 2); round++) {
      for (const [i, t] of (round % 2 === 0 ? targets : [...targets].reverse()).entries()) {
        const r = await runOnce(t.root, t.transport, nats.url, `bench${round}x${i}`, model, prompts);
        console.error(`round ${round + 1} ${label(t)}: first ${r.ms[0].toFixed(0)} ms, later median ${median(r.ms.slice(1)).toFixed(1)} ms; worker invalidations at start ${r.atStart}, while serving ${r.whileServing}`);
        runs.get(label(t))!.push(r);
      }
    }
    console.log(`bench-worker-nats: ${prompts.length} chat requests of ${f.chars ?? 1000} characters, one at a time, per run; worker under Node ${process.version}, server under Deno`);
    console.log("| worker | first request (ms) | later requests, median (ms) | worker invalidations at start, while serving (per run) |");
    console.log("|---|---|---|---|");
    for (const [target, rs] of runs) {
      console.log(`| ${target} | ${median(rs.map((r) => r.ms[0])).toFixed(0)} | ${median(rs.flatMap((r) => r.ms.slice(1))).toFixed(1)} | ${rs.map((r) => `${r.atStart}, ${r.whileServing}`).join("; ")} |`);
    }
  } finally {
    nats.child.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.message : String(e));
  exitProcess(2);
});
