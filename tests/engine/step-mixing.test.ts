/** Step mixing in the engine: split steps change batching, never outputs; `auto` switches from measured steps. */
import assert from "node:assert/strict";
import { projectRoot, sharedRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { Engine } from "../../src/engine/engine.ts";
import type { StepRunner } from "../../src/engine/engine-runner.ts";
import type { StepMixing } from "../../src/engine/scheduler-types.ts";
import { AutoStepMixing } from "../../src/engine/step-mixing-auto.ts";
import { type StepRecord, stepShapeOf } from "../../src/engine/step-record.ts";
import { loadModel } from "../../src/model/load.ts";
import { readTextFile } from "../../src/runtime/fs.ts";
import { startServer } from "../../src/serve/server.ts";
import type { Planner } from "../../planner/types.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const golden = JSON.parse(await readTextFile(`${sharedRoot}/reference/stories260K-greedy.json`)) as { prompt_ids_with_bos: number[]; greedy20: number[] };

const mixedStep = (r: StepRecord) => r.prefillTokens > 0 && r.decodeSeqs > 0;

test("Engine greedy outputs are the same with split and mixed steps (stories260K, concurrent requests)", async () => {
  const starts = ["Once upon a time", "Tom had a red ball and a big blue kite in the park", "The sun was hot and", "Lily saw a big dog", "One day a little bird flew over the tall green tree"];
  const prompts = [golden.prompt_ids_with_bos, ...starts.map((s) => [1, ...model.tokenizer.encode(s)])];
  const runAll = async (stepMixing: StepMixing) => {
    const steps: StepRecord[] = [];
    // A small budget, so prompts are chunked while the earlier requests decode.
    const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, scheduler: { maxBatchTokens: 12, stepMixing }, onStep: (r) => steps.push(r) });
    try {
      const rs = await Promise.all(prompts.map((prompt, i) => e.submit({ prompt, maxTokens: i === 0 ? 20 : 16, temperature: 0, ignoreEos: true }).result));
      assert.equal(e.pool.numUsedBlocks(), 0);
      return { outputs: rs.map((r) => r.tokenIds), steps };
    } finally {
      await e.stop();
    }
  };
  const mixed = await runAll("mixed");
  const split = await runAll("split");
  assert.deepEqual(split.outputs, mixed.outputs);
  assert.deepEqual(split.outputs[0], golden.greedy20);
  assert.ok(mixed.steps.filter(mixedStep).length >= 5, `mixed ran ${mixed.steps.filter(mixedStep).length} mixed steps`);
  assert.ok(split.steps.filter(mixedStep).length <= 1, `split ran ${split.steps.filter(mixedStep).length} mixed steps`);
  assert.ok(split.steps.length > mixed.steps.length, "separate steps take more of them");
});

/**
 * An engine on a fake runner and clock: a step costs 4 ms + 10 µs per token, plus `mixedExtraS`
 * when it mixes a prefill chunk with decodes. Six clients, one request at a time each, until the
 * engine has run `steps` steps. Returns the mode each step ran in.
 */
async function autoRun(mixedExtraS: number, steps: number): Promise<{ modes: StepMixing[]; records: StepRecord[] }> {
  let ms = 0;
  const runner: StepRunner = {
    numBlocks: 1024,
    blockSize: 16,
    run(entries) {
      const s = stepShapeOf(entries);
      ms += 1000 * (0.004 + 1e-5 * (s.prefillTokens + s.decodeSeqs) + (s.prefillTokens > 0 && s.decodeSeqs > 0 ? mixedExtraS : 0));
      return Promise.resolve({ ids: new Int32Array(entries.length).fill(7) });
    },
    close() {},
  };
  const modes: StepMixing[] = [];
  const records: StepRecord[] = [];
  const e: Engine = new Engine({
    runner, config: model.config, tokenizer: model.tokenizer, now: () => ms, scheduler: { maxBatchTokens: 64 }, autoStepMixing: true,
    onStep: (r) => { modes.push(e.scheduler.stepMixing); records.push(r); },
  });
  let k = 0;
  const client = async (c: number) => {
    while (modes.length < steps) {
      const n = 20 + ((k * 37) % 90), out = 4 + ((k * 13) % 24);
      const prompt = Array.from({ length: n }, (_, i) => 1 + ((i * 7 + k * 11 + c) % 500));
      k++;
      const r = await e.submit({ prompt, maxTokens: out, temperature: 0, ignoreEos: true }).result;
      assert.equal(r.completionTokens, out);
    }
  };
  await Promise.all([0, 1, 2, 3, 4, 5].map(client));
  await e.stop();
  return { modes, records };
}

test("Engine auto step mixing switches to split steps when mixed steps cost much more, and stays there", async () => {
  const { modes, records } = await autoRun(0.01, 1500);
  const first = modes.indexOf("split");
  // The first fit comes within the first ticks of 32 steps, the next 10 ticks later: two votes.
  assert.ok(first >= 10 * 32 && first < 1000, `switched at step ${first}, after two fits agreed`);
  assert.ok(modes.slice(first).every((m) => m === "split"), "no switching back");
  const after = records.slice(first);
  assert.ok(after.filter(mixedStep).length < after.filter((r) => r.prefillTokens > 0).length / 4, "mixed steps are rare once split");
});

test("Engine auto step mixing never switches when mixed steps cost nothing extra", async () => {
  const { modes, records } = await autoRun(0, 1500);
  assert.ok(modes.every((m) => m === "mixed"));
  // Replayed, the same steps give the step model a fit early on: it had its votes and kept mixing.
  const auto = new AutoStepMixing("mixed", 64);
  let readyAt = -1;
  records.forEach((r, i) => {
    assert.equal(auto.observe(r), "mixed");
    if (readyAt < 0 && auto.ready) readyAt = i;
  });
  assert.ok(readyAt >= 0 && readyAt < 500, `fitted at step ${readyAt}`);
  assert.equal(auto.mode, "mixed");
  assert.equal(auto.switches, 0);
});

test("startServer() passes stepMixing to the engine's scheduler", async () => {
  for (const stepMixing of ["split", "mixed", "auto"] as const) {
    const s = await startServer({ modelPath: "stories260K", model, host: "127.0.0.1", port: 0, backend: "reference", stepMixing, maxBatchTokens: 8 });
    try {
      const res = await Promise.all(["Once upon a time", "Tom had a red ball"].map((prompt) =>
        fetch(`${s.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: s.modelName, prompt, max_tokens: 4, temperature: 0 }) })));
      for (const r of res) assert.equal((await r.json() as { usage: { completion_tokens: number } }).usage.completion_tokens, 4);
      assert.equal(s.engine.scheduler.stepMixing, stepMixing === "auto" ? "mixed" : stepMixing, "auto starts mixed");
      const metrics = await (await fetch(`${s.url}/metrics`)).text();
      const mode = stepMixing === "auto" ? "mixed" : stepMixing;
      assert.match(metrics, new RegExp(`^evolving:step_mixing\\{model_name="stories260K",mode="${mode}"\\} 1$`, "m"));
    } finally {
      await s.shutdown();
    }
  }
});

test("startServer() with workers keeps a stepMixing given, leaves auto (the default) to the planner, and refuses auto without one", async () => {
  const cases = [
    { stepMixing: "split", mode: "split", fixed: true }, { stepMixing: "mixed", mode: "mixed", fixed: true },
    { stepMixing: "auto", mode: "mixed", fixed: false }, { stepMixing: undefined, mode: "mixed", fixed: false },
  ] as const;
  for (const c of cases) {
    // A planner that asks for the other mode on each tick (ticked here, not by the server's timer).
    const planner: Planner = { name: "other-mode", intervalS: 3600, tick: () => [{ kind: "step-mixing", split: c.mode === "mixed" }] };
    const s = await startServer({
      modelPath: "stories260K", model, host: "127.0.0.1", port: 0, backend: "reference", workers: 2, planner, ...(c.stepMixing ? { stepMixing: c.stepMixing } : {}),
    });
    try {
      const cl = s.cluster!;
      assert.deepEqual([cl.stepMixing, ...cl.workers.map((w) => w.engine.stepMixing)], [c.mode, c.mode, c.mode], `--step-mixing ${c.stepMixing}`);
      // The planner's decision is applied only where the mode was not given.
      cl.tick();
      assert.equal(cl.stepMixing, c.fixed ? c.mode : c.mode === "mixed" ? "split" : "mixed", `--step-mixing ${c.stepMixing} after a planner switch`);
    } finally {
      await s.shutdown();
    }
  }
  for (const planner of ["none", "sla"] as const) {
    await assert.rejects(
      startServer({ modelPath: "stories260K", model, host: "127.0.0.1", port: 0, backend: "reference", workers: 2, stepMixing: "auto", planner }),
      new RegExp(`--step-mixing auto with --workers is the online planner's to decide, and --planner ${planner} decides none`),
    );
  }
});

test("AutoStepMixing prices a step by its cycle: a mixed step whose loop costs much more switches to split", async () => {
  // The same steps as above, whose forwards cost nothing extra when mixed; here the engine's loop
  // around a mixed step (committing, streaming) takes 10 ms more, which only cycleSeconds shows.
  const { records } = await autoRun(0, 1500);
  const auto = new AutoStepMixing("mixed", 64);
  for (const r of records) auto.observe({ ...r, cycleSeconds: r.seconds + (mixedStep(r) ? 0.01 : 0) });
  assert.equal(auto.mode, "split");
  assert.equal(auto.switches, 1);
});
