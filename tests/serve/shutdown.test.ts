/** Stopping a server: a drain lets what is in flight finish and turns new work away; `serve` drains on SIGTERM. */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { type ServeProcess, spawnServe } from "../serve-process.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { ServerLifecycle } from "../../src/serve/lifecycle.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const PROMPT = "Once upon a time there was a little girl named Lily.";
/** A completion long enough to be in flight while the test acts (ignore_eos: exactly `max_tokens`). */
const LONG = { model: "stories260K", prompt: PROMPT, max_tokens: 300, temperature: 0, ignore_eos: true, stream: true as const, stream_options: { include_usage: true } };

/** Reads an OpenAI completion stream to its end: tokens counted by usage, and the finish reason. */
async function drainStream(stream: AsyncIterable<OpenAI.Completion>): Promise<{ tokens: number; finish: string | null }> {
  let tokens = 0;
  let finish: string | null = null;
  for await (const chunk of stream) {
    finish = chunk.choices[0]?.finish_reason ?? finish;
    if (chunk.usage) tokens = chunk.usage.completion_tokens;
  }
  return { tokens, finish };
}

test("RunningServer.drain() lets a stream in flight finish while new requests and /health get 503", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const stream = await client.completions.create(LONG as OpenAI.CompletionCreateParamsStreaming);
    const it = stream[Symbol.asyncIterator]();
    assert.equal((await it.next()).done, false);
    assert.equal(s.inFlight, 1);
    const drained = s.drain(60_000);

    const refused = await fetch(`${s.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "stories260K", prompt: PROMPT, max_tokens: 2 }) });
    assert.equal(refused.status, 503);
    assert.equal((await refused.json() as { error: { code: string } }).error.code, "shutting_down");
    assert.equal(refused.headers.get("retry-after"), "1");
    const health = await fetch(`${s.url}/health`);
    assert.equal(health.status, 503);
    assert.deepEqual(await health.json(), { status: "draining" });

    const rest = await drainStream({ [Symbol.asyncIterator]: () => it });
    assert.equal(rest.finish, "length");
    assert.equal(rest.tokens, 300, "the stream ran to its max_tokens");
    assert.equal(await drained, 0);
    assert.equal(s.inFlight, 0);
  } finally {
    await s.shutdown();
  }
});

test("RunningServer.drain() gives up after its grace and reports what is left; shutdown() then cancels it", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256 });
  let shut = false;
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const stream = await client.completions.create({ ...LONG, max_tokens: 400 } as OpenAI.CompletionCreateParamsStreaming);
    const it = stream[Symbol.asyncIterator]();
    assert.equal((await it.next()).done, false);
    assert.equal(await s.drain(20), 1);
    const reading = drainStream({ [Symbol.asyncIterator]: () => it }).catch(() => ({ tokens: -1, finish: "error" }));
    await s.shutdown();
    shut = true;
    const r = await reading;
    assert.notEqual(r.finish, "length", "the stream was cut short, not run to its end");
  } finally {
    if (!shut) await s.shutdown();
  }
});

test("ServerLifecycle.drain() keeps waiting through a grace longer than a timer holds (2^31 ms and more)", async () => {
  const life = new ServerLifecycle();
  const end = life.begin();
  let settled: number | undefined;
  // A setTimeout over 2^31 - 1 ms fires after 1 ms: without the guard this drain would resolve with 1 at once.
  const drained = life.drain(1e10 * 1000).then((left) => (settled = left));
  // A timer of 5 ms is due after any 1 ms timer set before it, so an overflowed grace would have fired by then.
  await new Promise((r) => setTimeout(r, 5));
  assert.equal(settled, undefined, "the drain was still waiting for the request in flight");
  end();
  assert.equal(await drained, 0);
});

for (const runtime of ["node", "deno"] as const) test(`serve CLI (${runtime}) finishes a stream in flight on SIGTERM, writes its step log and exits 0`, async () => {
  const dir = mkdtempSync(`${tmpdir()}/serve-sigterm-`);
  const stepLog = `${dir}/steps.jsonl`;
  let proc: ServeProcess | undefined;
  try {
    proc = await spawnServe(runtime, ["--port", "0", "--backend", "reference", "--step-log", stepLog]);
    const { child, url, exited } = proc;
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
    const stream = await client.completions.create(LONG as OpenAI.CompletionCreateParamsStreaming);
    const it = stream[Symbol.asyncIterator]();
    assert.equal((await it.next()).done, false);
    // Sent by pid: Deno's child_process reports a child it was asked to kill() as killed by that signal, whatever its exit.
    process.kill(child.pid!, "SIGTERM");
    const rest = await drainStream({ [Symbol.asyncIterator]: () => it });
    assert.equal(rest.finish, "length");
    assert.equal(rest.tokens, 300);
    assert.equal(await exited, 0, proc.stderr());
    assert.match(proc.stderr(), /serve: SIGTERM: finishing 1 request in flight \(up to 30 s; send SIGTERM again to stop now\)/);
    assert.match(proc.stderr(), /serve: stopped\n/);
    const steps = readFileSync(stepLog, "utf8").trim().split("\n").map((l) => JSON.parse(l) as { decodeSeqs: number });
    assert.ok(steps.filter((r) => r.decodeSeqs === 1).length >= 299, `${steps.length} steps logged: the log was closed, not cut`);
  } finally {
    if (proc?.child.exitCode === null) proc.child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
});
