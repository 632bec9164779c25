/** The baseline planner in a real server (`serve --workers N --planner sla`): profiled, ticking, parking workers. */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import OpenAI from "openai";
import { eventually } from "../eventually.ts";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { parseOfflineProfile } from "../../src/cluster/engine-profiler.ts";
import { modelFingerprint } from "../../src/model/fingerprint.ts";
import { slaInitialRoles } from "../../src/serve/sla-planner-setup.ts";
import { SlaProfilePlanner } from "../../planner/sla-profile-planner.ts";
import { LoadPlanner } from "../../planner/load-planner.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);

test("slaInitialRoles() starts half the workers prefilling and the rest decoding, and refuses fewer than 2", () => {
  assert.deepEqual(slaInitialRoles(2), ["prefill", "decode"]);
  assert.deepEqual(slaInitialRoles(5), ["prefill", "prefill", "decode", "decode", "decode"]);
  assert.throws(() => slaInitialRoles(1), /at least 2 workers .* got 1/);
});

for (const transport of ["in-process", "threads"] as const) test(`startServer({ planner: "sla", transport: "${transport}" }) measures and keeps the workers' profile, then parks the workers its replica targets leave out (and so does "load")`, async () => {
  const dir = mkdtempSync(`${tmpdir()}/sla-server-`);
  const profilePath = `${dir}/profile.json`;
  const base = { modelPath, model, host: "127.0.0.1", port: 0, backend: "reference" as const, kvBlocks: 96, workers: 3, planner: "sla" as const, transport };
  try {
    const s = await startServer({ ...base, sla: { profilePath, intervalS: 1, startupDelayS: 0 } });
    try {
      assert.match(s.slaProfileSource ?? "", /^profile measured on worker worker-0 in [\d.]+ s, written to .*profile\.json$/);
      const profile = parseOfflineProfile(readFileSync(profilePath, "utf8"), profilePath, modelFingerprint(model));
      assert.equal((JSON.parse(readFileSync(profilePath, "utf8")) as Record<string, unknown>).modelFingerprint, modelFingerprint(model), "the file names the model it was measured on");
      assert.ok(profile.prefill.length >= 2 && profile.decode.length >= 2, "the file holds the sweep");
      assert.ok(s.cluster!.planner instanceof SlaProfilePlanner);
      assert.deepEqual(s.serving.workerStatuses().map((w) => w.role), ["prefill", "decode", "decode"], "disaggregated from the start");
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
      // A light load: the profile says one prefill and one decode worker carry it, so the third is parked.
      const parkedCount = await eventually(async () => {
        const r = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 8, temperature: 0 });
        assert.equal(r.usage!.completion_tokens, 8);
        const metrics = await (await fetch(`${s.url}/metrics`)).text();
        return (metrics.match(/evolving:worker_parked\{[^}]*\} 1/g) ?? []).length;
      }, (n) => n > 0, 20_000, 200);
      assert.equal(parkedCount, 1, "one worker parked once the planner has seen requests finish");
      const statuses = s.serving.workerStatuses();
      assert.deepEqual(statuses.filter((w) => !w.parked).map((w) => w.role).sort(), ["decode", "prefill"]);
      // The parked worker takes nothing new; the others still answer.
      const parked = s.cluster!.workers.find((w) => w.parked)!;
      const before = parked.engine.metrics.finished.get("length") ?? 0;
      for (let i = 0; i < 3; i++) {
        await client.completions.create({ model: "stories260K", prompt: `Tom had a dog number ${i}`, max_tokens: 4, temperature: 0 });
      }
      assert.equal(parked.engine.metrics.finished.get("length") ?? 0, before);
    } finally {
      await s.shutdown();
    }
    // The next start reads the profile instead of measuring again: here the load-based mode, which
    // parks a decode worker once every decode worker is well under the ITL target, requests or not
    // (a TTFT target far off: a slow machine's profile can put a long prompt's TTFT past 500 ms, and
    // then this mode turns the decode worker it frees into a second prefill worker instead).
    const again = await startServer({ ...base, planner: "load", sla: { profilePath, intervalS: 1, ttftTargetS: 30 } });
    try {
      assert.equal(again.slaProfileSource, `profile read from ${profilePath}`);
      assert.ok(again.cluster!.planner instanceof LoadPlanner);
      const parked = await eventually(() => again.serving.workerStatuses().filter((w) => w.parked).map((w) => w.role), (p) => p.length > 0, 20_000, 100);
      assert.deepEqual(parked, ["decode"]);
    } finally {
      await again.shutdown();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("startServer({ planner: \"sla\" }) refuses one worker, a bad profile file, and SLA settings without the SLA planner", async () => {
  const dir = mkdtempSync(`${tmpdir()}/sla-server-`);
  const base = { modelPath, model, host: "127.0.0.1", port: 0, backend: "reference" as const, kvBlocks: 64 };
  try {
    await assert.rejects(startServer({ ...base, workers: 1, planner: "sla" }), /--planner sla needs at least 2 workers/);
    await assert.rejects(startServer({ ...base, workers: 2, sla: { intervalS: 5 } }), /need --planner sla/);
    const bad = `${dir}/bad.json`;
    writeFileSync(bad, JSON.stringify({ prefill: [], decode: [] }));
    await assert.rejects(startServer({ ...base, workers: 2, planner: "sla", sla: { profilePath: bad } }), /Profile ".*bad\.json" has no prefill points/);
    const other = `${dir}/other.json`;
    writeFileSync(other, JSON.stringify({ modelFingerprint: "0123456789abcdef", profiledIsl: 64, profiledOsl: 16, prefill: [{ isl: 64, tokensPerS: 2000, ttftS: 0.03 }], decode: [{ context: 64, batch: 1, itlS: 0.01, tokensPerS: 100 }] }));
    await assert.rejects(startServer({ ...base, workers: 2, planner: "sla", sla: { profilePath: other } }), /Profile ".*other\.json" was measured on another model \(modelFingerprint 0123456789abcdef, this model's [0-9a-f]{32}\)/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

