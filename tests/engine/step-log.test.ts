import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import os from "node:os";
import { join } from "node:path";
import { eventually } from "../eventually.ts";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { StepRecord } from "../../src/engine/step-record.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import type { PlannerLogRecord, RouteLogRecord } from "../../src/serve/step-log.ts";
import type { Planner, PlannerAction } from "../../planner/types.ts";
import { parseStepLog } from "../../src/sim/calibration.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);

test("Engine onStep reports each step's prefill and decode shape with its measured time", async () => {
  const records: StepRecord[] = [];
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, onStep: (r) => records.push(r) });
  const prompt = Array.from({ length: 40 }, (_, i) => 1 + ((i * 7) % 500));
  const r = await e.submit({ prompt, maxTokens: 5, temperature: 0, ignoreEos: true }).result;
  await e.stop();
  assert.equal(r.completionTokens, 5);
  // One prefill step of the 40-token prompt (it fits the default budget), then 4 decode steps.
  assert.equal(records.length, 5, JSON.stringify(records));
  assert.deepEqual({ ...records[0], seconds: 0, startS: 0, cycleSeconds: 0 }, { prefillTokens: 40, prefillAttnPairs: (40 * 41) / 2, decodeSeqs: 0, decodeAttnTokens: 0, seconds: 0, startS: 0, cycleSeconds: 0 });
  records.slice(1).forEach((s, k) => {
    assert.equal(s.prefillTokens, 0);
    assert.equal(s.decodeSeqs, 1);
    assert.equal(s.decodeAttnTokens, 41 + k, "a decode reads its whole context, growing by one per step");
  });
  assert.ok(records.every((s) => s.seconds > 0));
  records.slice(1).forEach((s, k) => {
    const prev = records[k];
    assert.ok(s.startS! >= prev.startS! + prev.seconds, `step ${k + 1} starts at ${s.startS} s, before step ${k} ends`);
    assert.ok(prev.cycleSeconds! >= prev.seconds, "a loop iteration holds its forward");
  });
});

test("startServer() with stepLogPath writes a step log the simulator's calibration accepts", async () => {
  const dir = await mkdtemp(join(os.tmpdir(), "steplog-"));
  const path = join(dir, "steps.jsonl");
  const s = await startServer({ modelPath: "stories260K", model, host: "127.0.0.1", port: 0, backend: "reference", stepLogPath: path });
  try {
    const res = await fetch(`${s.url}/v1/completions`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: s.modelName, prompt: "Once upon a time", max_tokens: 6, temperature: 0 }),
    });
    assert.equal(res.status, 200);
    await res.json();
  } finally {
    await s.shutdown();
  }
  const steps = parseStepLog(new TextDecoder().decode(await readFile(path)));
  assert.ok(steps.length >= 3, `${steps.length} steps logged`);
  assert.ok(steps[0].prefillTokens > 0 && steps.slice(1).every((x) => x.decodeSeqs === 1));
  await rm(dir, { recursive: true });
});

test("startServer() with workers and stepLogPath names each step's worker and logs its cycle", async () => {
  const dir = await mkdtemp(join(os.tmpdir(), "steplog-"));
  const path = join(dir, "steps.jsonl");
  const s = await startServer({ modelPath: "stories260K", model, host: "127.0.0.1", port: 0, backend: "reference", workers: 2, stepLogPath: path });
  try {
    for (const prompt of ["Once upon a time", "The cat sat on the mat"]) {
      const res = await fetch(`${s.url}/v1/completions`, {
        method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: s.modelName, prompt, max_tokens: 4, temperature: 0 }),
      });
      assert.equal(res.status, 200);
      await res.json();
    }
  } finally {
    await s.shutdown();
  }
  const lines = new TextDecoder().decode(await readFile(path)).trim().split("\n").map((l) => JSON.parse(l) as StepRecord & { worker?: string });
  assert.ok(lines.length >= 4, `${lines.length} steps logged`);
  for (const l of lines) {
    assert.match(l.worker ?? "", /^worker-[01]$/);
    assert.ok(l.cycleSeconds! >= l.seconds && typeof l.startS === "number", JSON.stringify(l));
  }
  await rm(dir, { recursive: true });
});

test("startServer() with mixedStepOverheadMs slows mixed steps on worker threads (the option reaches each worker's engine)", async () => {
  const dir = await mkdtemp(join(os.tmpdir(), "steplog-"));
  const path = join(dir, "steps.jsonl");
  // Every prompt is prefilled where it decodes (worker-1): the second prompt's prefill shares a step with the first's decode.
  const s = await startServer({
    modelPath: `${projectRoot}/models/stories260K.gguf`, model, host: "127.0.0.1", port: 0, backend: "reference", workers: 2, transport: "threads",
    roles: ["prefill", "decode"], planner: "none", router: "kv-aware", localPrefillTokens: 4096, mixedStepOverheadMs: 80, stepLogPath: path,
  });
  try {
    const body = (prompt: string, stream: boolean, maxTokens: number) => JSON.stringify({ model: s.modelName, prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream });
    // The first decodes long enough (300 tokens) that the second's prefill surely lands beside it: with
    // 40 it could finish first on a loaded machine, and no step mixed.
    const first = await fetch(`${s.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: body("Once upon a time", true, 300) });
    assert.equal(first.status, 200);
    const reader = first.body!.getReader();
    await reader.read(); // the first is decoding
    const second = await fetch(`${s.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: body("The cat sat on the mat", false, 40) });
    assert.equal(second.status, 200);
    await second.json();
    while (!(await reader.read()).done) { /* drain the stream */ }
  } finally {
    await s.shutdown();
  }
  const lines = new TextDecoder().decode(await readFile(path)).trim().split("\n").map((l) => JSON.parse(l) as StepRecord & { worker?: string });
  const mixed = lines.filter((l) => l.prefillTokens > 0 && l.decodeSeqs > 0);
  assert.ok(mixed.length >= 1, `no mixed step in ${lines.length} steps`);
  for (const l of mixed) assert.ok(l.seconds >= 0.079, `a mixed step on ${l.worker} took ${l.seconds} s, under the 80 ms overhead`);
  await rm(dir, { recursive: true });
});

test("startServer() with plannerLogPath writes each planner decision with its time and what it changed", async () => {
  const dir = await mkdtemp(join(os.tmpdir(), "plannerlog-"));
  const path = join(dir, "planner.jsonl");
  const script: PlannerAction[][] = [[{ kind: "flip", workerId: "worker-0", to: "mixed" }, { kind: "flip", workerId: "worker-1", to: "decode" }]];
  const planner: Planner = { name: "scripted", intervalS: 1, tick: () => script.shift() ?? [] };
  const before = Date.now() / 1000;
  const s = await startServer({
    modelPath: "stories260K", model, host: "127.0.0.1", port: 0, backend: "reference", workers: 2, roles: ["prefill", "decode"], planner, plannerLogPath: path,
  });
  try {
    // (Its first tick is a second away; the deadline only turns a hang into a failure, generous for CI.)
    await eventually(() => script.length, (n) => n === 0, 60_000, 100);
    assert.equal(script.length, 0, "the planner ticked");
    assert.deepEqual(s.cluster!.workerStatuses().map((w) => w.role), ["mixed", "decode"]);
  } finally {
    await s.shutdown();
  }
  const after = Date.now() / 1000;
  const lines = new TextDecoder().decode(await readFile(path)).trim().split("\n").map((l) => JSON.parse(l) as PlannerLogRecord);
  assert.deepEqual(lines.map(({ unixS: _t, ...rest }) => rest), [
    { kind: "flip", workerId: "worker-0", to: "mixed", changed: true, from: "prefill" },
    { kind: "flip", workerId: "worker-1", to: "decode", changed: false, from: "decode" },
  ]);
  for (const l of lines) assert.ok(l.unixS >= before && l.unixS <= after, `decision time ${l.unixS} outside the run (${before}–${after})`);
  await rm(dir, { recursive: true });
});

test("startServer() refuses plannerLogPath for one engine, naming the path", async () => {
  await assert.rejects(
    startServer({ modelPath: "stories260K", model, host: "127.0.0.1", port: 0, backend: "reference", plannerLogPath: "/tmp/x.jsonl" }),
    /--planner-log "\/tmp\/x.jsonl" needs --workers/,
  );
});

test("startServer() with routeLogPath writes each routing decision with every candidate and the route", async () => {
  const dir = await mkdtemp(join(os.tmpdir(), "routelog-"));
  const path = join(dir, "routes.jsonl");
  const before = Date.now() / 1000;
  const s = await startServer({ modelPath: "stories260K", model, host: "127.0.0.1", port: 0, backend: "reference", workers: 2, planner: "none", routeLogPath: path });
  try {
    for (const key of ["s-1", "s-1"]) {
      const res = await fetch(`${s.url}/v1/chat/completions`, {
        method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: s.modelName, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 3, prompt_cache_key: key }),
      });
      assert.equal(res.status, 200, await res.text());
    }
  } finally {
    await s.shutdown();
  }
  const after = Date.now() / 1000;
  const lines = new TextDecoder().decode(await readFile(path)).trim().split("\n").map((l) => JSON.parse(l) as RouteLogRecord);
  assert.equal(lines.length, 2);
  for (const l of lines) {
    assert.ok(l.unixS >= before && l.unixS <= after, `route time ${l.unixS} outside the run (${before}–${after})`);
    assert.deepEqual(l.candidates.map((c) => c.id), ["worker-0", "worker-1"]);
    assert.ok(l.candidates.some((c) => c.id === l.route.decodeWorker));
    assert.ok(l.request.promptTokens > 0);
  }
  assert.equal(lines[0].request.newSession, true);
  // The second turn of the session is routed knowing where the first went.
  assert.equal(lines[1].request.lastWorker, lines[0].route.decodeWorker);
  assert.equal(lines[1].request.newSession, false);
  await rm(dir, { recursive: true });
});

test("startServer() refuses routeLogPath for one engine, naming the path", async () => {
  await assert.rejects(
    startServer({ modelPath: "stories260K", model, host: "127.0.0.1", port: 0, backend: "reference", routeLogPath: "/tmp/r.jsonl" }),
    /--route-log "\/tmp\/r.jsonl" needs --workers: one engine has no router/,
  );
});
