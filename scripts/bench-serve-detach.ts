/**
 * What a detached ArrayBuffer costs a single-engine server on Node: starts `serve` (reference backend,
 * the bench-agent-kv scripted model) from each checkout given, under Node (and, with `--runtimes`,
 * Deno, whose V8 pays no such cost) with V8's `--trace-protector-invalidation`, sends the same sequence of chat requests one at a time (distinct
 * prompts of `--chars` characters: every one is prefilled whole), and prints the median latency of the
 * first request and of the rest, and the protector invalidations V8 printed before the server listened
 * and after. V8 prints one per isolate: under Node tsx's loader thread prints one of its own while
 * loading, which does not touch the main isolate, so more than one at start means the server's own
 * isolate detached while starting, and one while serving that it detached then. Servers alternate between rounds. Why the body read
 * and the CORS headers avoid byte streams (src/serve/body-read.ts, src/serve/cors.ts); figures:
 * docs/results/bench-detach.md.
 *
 *   npx tsx scripts/bench-serve-detach.ts [--roots ../before,.] [--runtimes node,deno] [--requests 30] [--chars 3000] [--rounds 2]
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
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

interface ServerRun {
  /** Milliseconds of each request, in order. */
  ms: number[];
  /** Invalidations printed before the server listened, and after. */
  atStart: number;
  whileServing: number;
}

/** A server to start: a checkout, under Node (tsx) or Deno. */
interface Target {
  root: string;
  runtime: "node" | "deno";
}

/** One server from `t.root`: every prompt sent in turn, then stopped. */
async function runServer(t: Target, model: string, prompts: readonly string[]): Promise<ServerRun> {
  const { root } = t;
  const serveArgs = [`${root}/src/cli/serve.ts`, "--model", model, "--backend", "reference", "--port", "0", "--kv-blocks", "2048"];
  const [cmd, args] = t.runtime === "node"
    ? ["node", ["--trace-protector-invalidation", "--import", "tsx", ...serveArgs]]
    : [`${root}/node_modules/deno/deno`, ["run", "-A", "--no-check", "--v8-flags=--trace-protector-invalidation", ...serveArgs]];
  const child = spawn(cmd, args, {
    cwd: root, env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "" }, stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  const url = await new Promise<string>((ok, fail) => {
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
      const m = /listening on (http:\/\/\S+)/.exec(stderr);
      if (m) ok(m[1]);
    });
    child.on("exit", (code) => fail(new Error(`serve from ${root} exited with ${code} before listening: ${stderr}`)));
  });
  const count = () => stdout.split(INVALIDATED).length - 1;
  const atStart = count();
  try {
    const ms = await timeChats(url, prompts, `serve from ${root}`);
    return { ms, atStart, whileServing: count() - atStart };
  } finally {
    child.kill("SIGKILL");
  }
}

async function main(): Promise<void> {
  const f = parseArgs(cliArgs(), {
    roots: { kind: "string", help: "checkouts to start serve from, comma-separated (default .)" },
    runtimes: { kind: "string", help: "node, deno or both, comma-separated (default node)" },
    requests: { kind: "int", min: 2, help: "chat requests per server (default 30)" },
    chars: { kind: "int", min: 10, help: "characters of each prompt (default 3000)" },
    rounds: { kind: "int", min: 1, help: "servers started from each root, order alternated (default 2)" },
  });
  const roots = (f.roots ?? ".").split(",").map((r) => resolve(r));
  const runtimes = (f.runtimes ?? "node").split(",").map((r) => r.trim());
  const bad = runtimes.find((r) => r !== "node" && r !== "deno");
  if (bad !== undefined) throw new Error(`Unknown runtime "${bad}" in --runtimes; choose node or deno`);
  const targets: Target[] = roots.flatMap((root) => runtimes.map((runtime) => ({ root, runtime: runtime as Target["runtime"] })));
  const label = (t: Target) => `${t.root} (${t.runtime})`;
  const rnd = seededRandom(3);
  const prompts = Array.from({ length: f.requests ?? 30 }, (_, i) => `task ${i} ${words(rnd, f.chars ?? 3000)}${ENDING.final}`);
  const dir = mkdtempSync(`${tmpdir()}/bench-serve-detach-`);
  try {
    const model = `${dir}/agent-scripted.gguf`;
    await agentModel(model);
    const runs = new Map<string, ServerRun[]>(targets.map((t) => [label(t), []]));
    for (let round = 0; round < (f.rounds ?? 2); round++) {
      for (const t of round % 2 === 0 ? targets : [...targets].reverse()) {
        const r = await runServer(t, model, prompts);
        console.error(`round ${round + 1} ${label(t)}: first ${r.ms[0].toFixed(0)} ms, later median ${median(r.ms.slice(1)).toFixed(1)} ms; invalidations at start ${r.atStart}, while serving ${r.whileServing}`);
        runs.get(label(t))!.push(r);
      }
    }
    console.log(`bench-serve-detach: ${prompts.length} chat requests of ${f.chars ?? 3000} characters, one at a time, per server; Node ${process.version}, Deno from node_modules`);
    console.log("| serve from | first request (ms) | later requests, median (ms) | invalidations at start, while serving (per server) |");
    console.log("|---|---|---|---|");
    for (const [target, rs] of runs) {
      const first = median(rs.map((r) => r.ms[0]));
      const later = median(rs.flatMap((r) => r.ms.slice(1)));
      console.log(`| ${target} | ${first.toFixed(0)} | ${later.toFixed(1)} | ${rs.map((r) => `${r.atStart}, ${r.whileServing}`).join("; ")} |`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.message : String(e));
  exitProcess(2);
});
