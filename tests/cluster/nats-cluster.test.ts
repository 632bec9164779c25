/**
 * The NATS control plane end to end: a real `nats-server`, worker processes (`worker --nats`) that
 * announce themselves before and after the server starts, and a server (`startServer({ nats })`)
 * that joins them, serves the openai client from them, and drains one that leaves on SIGTERM.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { projectRoot, test } from "../harness.ts";
import { connectControlPlane, ControlPlaneError } from "../../src/cluster/nats-membership.ts";
import { runtimeName } from "../../src/runtime/env.ts";
import { model, modelPath } from "./fixtures.ts";
import { startNatsServer } from "./nats-server.ts";

/** Starts `worker --nats URL --id ID` under Node; resolves once it has announced itself. */
function startWorker(natsUrl: string, id: string): Promise<{ child: ChildProcess; exited: Promise<number | null> }> {
  const child = spawn("node", [
    "--import", `${projectRoot}/node_modules/tsx/dist/loader.mjs`, `${projectRoot}/src/cli/worker.ts`,
    "--listen", "127.0.0.1:0", "--nats", natsUrl, "--id", id, "--cluster-name", "nats-test",
  ], { cwd: projectRoot, stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, NODE_OPTIONS: "" } });
  let log = "";
  const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
  // The deadline only turns a start that hangs into a failure: generous, as a loaded CI machine is slow.
  let timer: ReturnType<typeof setTimeout> | undefined;
  return new Promise<{ child: ChildProcess; exited: Promise<number | null> }>((resolve, reject) => {
    timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`worker ${id} did not announce itself within 120 s: ${log}`));
    }, 120_000);
    child.stderr!.on("data", (d: Uint8Array) => {
      log += new TextDecoder().decode(d);
      if (/announced as/.test(log)) resolve({ child, exited });
    });
    void exited.then((code) => reject(new Error(`worker ${id} exited with ${code}: ${log}`)));
  }).finally(() => clearTimeout(timer));
}

async function until(what: string, cond: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`Timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test("startServer({ nats }) joins workers that announce themselves, serves the openai client, and drains one that leaves", async () => {
  const { startServer } = await import("../../src/serve/server.ts");
  const OpenAI = (await import("openai")).default;
  const nats = await startNatsServer();
  const children: ChildProcess[] = [];
  try {
    // One worker is up before the server, one comes after it.
    const a = await startWorker(nats.url, "w-a");
    children.push(a.child);
    const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, nats: nats.url, clusterName: "nats-test", drainMs: 30_000 });
    try {
      const cl = s.cluster!;
      await until("w-a joined", () => cl.workers.length === 1);
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
      const c = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 20, temperature: 0 });
      assert.equal(c.choices[0].text, ", there was a little girl named Lily. She loved to play outsid");
      const b = await startWorker(nats.url, "w-b");
      children.push(b.child);
      await until("w-b joined", () => cl.workers.length === 2);
      assert.deepEqual(cl.workers.map((w) => w.id).sort(), ["w-a", "w-b"]);
      assert.equal(cl.counters.joined, 2);
      // A message on the workers' subject that is not an announcement changes nothing.
      const nc = await connectControlPlane(nats.url, "test");
      nc.publish("evolving.nats-test.workers", "{\"id\":\"evil\"}");
      await nc.flush();
      await nc.close();

      // A long request is under way on one worker when that worker is told to stop: it finishes there.
      const stream = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 300, temperature: 0, stream: true });
      const it = stream[Symbol.asyncIterator]();
      await it.next();
      const busy = cl.workers.find((w) => w.inFlight > 0)!;
      const leaver = busy.id === "w-a" ? a : b;
      leaver.child.kill("SIGTERM");
      // (A SIGTERM, then the worker's word over NATS: seconds on a loaded machine; the default deadline.)
      await until("the leaver is draining", () => busy.draining);
      let text = "";
      let finish: string | null = null;
      for (let r = await it.next(); !r.done; r = await it.next()) {
        text += r.value.choices[0]?.text ?? "";
        finish = r.value.choices[0]?.finish_reason ?? finish;
      }
      assert.ok(text.length > 0);
      assert.equal(finish, "length", "the drained request ran to its max_tokens");
      // (Deno's node:child_process reports the signal it sent, not the exit code the handler chose.)
      const code = await leaver.exited;
      if (runtimeName() === "node") assert.equal(code, 0, "the worker exited cleanly once drained");
      await until("the leaver is gone", () => cl.workers.length === 1);
      assert.notEqual(cl.workers[0].id, busy.id);
      assert.equal(cl.counters.removed, 1);
      const after = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 20, temperature: 0 });
      assert.equal(after.choices[0].text, c.choices[0].text, "the worker left serves on");
      const metrics = await (await fetch(`${s.url}/metrics`)).text();
      assert.doesNotMatch(metrics, new RegExp(`worker="${busy.id}"`), "the leaver is gone from /metrics");
    } finally {
      await s.shutdown();
    }
  } finally {
    for (const ch of children) ch.kill("SIGKILL");
    nats.stop();
  }
});

test("startServer({ nats, planner: \"load\" }) plans the Dynamo-like pools over the workers that joined, from a profile file it needs", async () => {
  const { startServer } = await import("../../src/serve/server.ts");
  const dir = mkdtempSync(`${tmpdir()}/nats-sla-`);
  const nats = await startNatsServer();
  const children: ChildProcess[] = [];
  try {
    const missing = `${dir}/none.json`;
    // No worker is there to measure a profile on: one that does not exist is refused, and nothing is left running.
    await assert.rejects(
      startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", nats: nats.url, clusterName: "nats-test", planner: "load", sla: { profilePath: missing } }),
      (e: unknown) => e instanceof RangeError && e.message.includes(`--planner load with --nats reads its offline profile from --sla-profile, and "${missing}" does not exist`),
    );
    const profilePath = `${dir}/profile.json`;
    writeFileSync(profilePath, JSON.stringify({
      profiledIsl: 64, profiledOsl: 16,
      prefill: [{ isl: 64, tokensPerS: 2000, ttftS: 0.03 }],
      decode: [{ context: 64, batch: 1, itlS: 0.01, tokensPerS: 100 }, { context: 64, batch: 8, itlS: 0.02, tokensPerS: 400 }],
    }));
    const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, nats: nats.url, clusterName: "nats-test", planner: "load", sla: { profilePath } });
    try {
      assert.match(s.slaProfileSource ?? "", /profile read from/);
      const cl = s.cluster!;
      for (const id of ["w-a", "w-b", "w-c"]) children.push((await startWorker(nats.url, id)).child);
      await until("three workers joined", () => cl.workers.length === 3);
      // They join as mixed; the load mode's first decision (every 5 s) makes one prefill and one decode pool and parks the third.
      await until("the planner placed them", () => cl.workers.some((w) => w.role === "prefill") && cl.workers.some((w) => w.role === "decode"), 30_000);
      const places = cl.workers.map((w) => (w.parked ? "parked" : w.role)).sort();
      assert.deepEqual(places, ["decode", "parked", "prefill"]);
      const OpenAI = (await import("openai")).default;
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
      const c = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 20, temperature: 0 });
      assert.equal(c.choices[0].text, ", there was a little girl named Lily. She loved to play outsid", "the pools it made serve");
    } finally {
      await s.shutdown();
    }
  } finally {
    for (const ch of children) ch.kill("SIGKILL");
    nats.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("startServer({ nats, planner: \"sla\" }) sizes the pools from measured demand over the workers that joined, every interval", async () => {
  const { startServer } = await import("../../src/serve/server.ts");
  const dir = mkdtempSync(`${tmpdir()}/nats-sla-`);
  const nats = await startNatsServer();
  const children: ChildProcess[] = [];
  try {
    // A profile whose prefill takes 40 tokens/s a worker: one ~25-token prompt a 1 s interval needs one
    // prefill worker, two or more need two. Decode is never short, and the profile's TTFT is below any
    // measured one, so the TTFT correction (capped at 1) leaves the demand as it is.
    const profilePath = `${dir}/profile.json`;
    writeFileSync(profilePath, JSON.stringify({
      profiledIsl: 64, profiledOsl: 16,
      prefill: [{ isl: 64, tokensPerS: 40, ttftS: 1e-4 }],
      decode: [{ context: 64, batch: 1, itlS: 0.01, tokensPerS: 1e6 }],
    }));
    const s = await startServer({
      modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, nats: nats.url, clusterName: "nats-test",
      planner: "sla", sla: { profilePath, intervalS: 1, startupDelayS: 0 },
    });
    try {
      const cl = s.cluster!;
      const places = () => cl.workers.map((w) => (w.parked ? "parked" : w.role)).sort().join(",");
      for (const w of await Promise.all(["w-a", "w-b", "w-c"].map((id) => startWorker(nats.url, id)))) children.push(w.child);
      await until("three workers joined", () => cl.workers.length === 3);
      assert.equal(places(), "mixed,mixed,mixed", "no decision before a request completes");
      const OpenAI = (await import("openai")).default;
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
      const prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
      const one = await client.completions.create({ model: "stories260K", prompt, max_tokens: 4, temperature: 0 });
      assert.ok(one.usage!.prompt_tokens > 20 && one.usage!.prompt_tokens < 40, `a prompt of ${one.usage!.prompt_tokens} tokens`);
      // One request in an interval: one prefill and one decode worker, the third parked.
      await until("the planner sized the pools for one request", () => places() === "decode,parked,prefill", 30_000);
      // A burst: the interval it completes in wants more prefill than one worker gives, and the parked worker prefills.
      await Promise.all(Array.from({ length: 12 }, () => client.completions.create({ model: "stories260K", prompt, max_tokens: 4, temperature: 0 })));
      await until("the planner gave prefill the parked worker", () => places() === "decode,prefill,prefill", 30_000);
      const after = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 20, temperature: 0 });
      assert.equal(after.choices[0].text, ", there was a little girl named Lily. She loved to play outsid", "the pools it made serve");
    } finally {
      await s.shutdown();
    }
  } finally {
    for (const ch of children) ch.kill("SIGKILL");
    nats.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("startServer({ nats }) answers 503 until a worker joins, and names a NATS server it cannot reach", async () => {
  const { startServer } = await import("../../src/serve/server.ts");
  const nats = await startNatsServer();
  try {
    const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, nats: nats.url, clusterName: "empty" });
    try {
      const r = await fetch(`${s.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "stories260K", prompt: "Hi", max_tokens: 2 }) });
      assert.equal(r.status, 503);
      assert.equal(r.headers.get("retry-after"), "1");
      const body = await r.json() as { error: { code: string; message: string } };
      assert.equal(body.error.code, "no_worker");
      assert.match(body.error.message, /No worker is running/);
      const health = await fetch(`${s.url}/health`);
      assert.equal(health.status, 503, "a load balancer sees it cannot serve yet");
      assert.deepEqual(await health.json(), { status: "no_worker" });
    } finally {
      await s.shutdown();
    }
  } finally {
    nats.stop();
  }
  await assert.rejects(
    startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", nats: "127.0.0.1:9" }),
    (e: unknown) => e instanceof ControlPlaneError && /Cannot reach the NATS server at "127\.0\.0\.1:9"/.test(e.message),
  );
});

test("connectControlPlane() passes a token from the URL to a NATS server that requires one, and never quotes it", async () => {
  const nats = await startNatsServer(["--auth", "n4ts-secret"]);
  try {
    const hostPort = nats.url.replace("nats://", "");
    const nc = await connectControlPlane(`nats://n4ts-secret@${hostPort}`, "test");
    const got = new Promise<string>((r) => nc.subscribe("t", { callback: (_e, m) => r(m.string()) }));
    nc.publish("t", "hello");
    assert.equal(await got, "hello");
    await nc.close();
    await assert.rejects(connectControlPlane(`nats://wrong@${hostPort}`, "test"), (e: unknown) => e instanceof ControlPlaneError && !/wrong/.test(e.message) && /Cannot reach the NATS server/.test(e.message));
  } finally {
    nats.stop();
  }
});
