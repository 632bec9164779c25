/**
 * `serve --speculative-config '{"method": "eagle3", "model": HEAD}'` (and "eagle") through the real
 * openai client, on a random Llama GGUF and random heads written as their checkpoints are: the server
 * attaches the head (worker threads attach their own), answers as without drafts (greedy), and counts
 * the head's drafts in /metrics; on WebGPU too, where the warm-up compiles the head's kernels.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import type { Speculation } from "../../src/engine/ngram-draft.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { writeTestGguf } from "../model/model-files.ts";
import { EAGLE_TARGET_SPEC, writeEagleHead } from "../engine/eagle-files.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { assertWarmUpCompilesDrafting, servedAnswers, type ServerOptions } from "./draft-server-fixtures.ts";

const dir = mkdtempSync(`${tmpdir()}/eagle-serve-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const modelPath = await writeTestGguf(dir, "llama", EAGLE_TARGET_SPEC);
writeEagleHead(`${dir}/eagle3`, { method: "eagle3", seed: 21, draftVocab: 200, d2t: Array.from({ length: 200 }, (_, d) => (d * 3) % 100) });
writeEagleHead(`${dir}/eagle`, { method: "eagle", seed: 22 });
// The newer EAGLE-3 layouts at once: a Qwen3-style layer, fc_norm, norm_output, a sliding window, YaRN.
writeEagleHead(`${dir}/eagle3-variants`, {
  method: "eagle3", seed: 24, speculators: true, qkNorm: true, fcNorm: "each", normOutput: true,
  extraConfig: { layer_types: ["sliding_attention"], sliding_window: 4, rope_scaling: { rope_type: "yarn", factor: 4, original_max_position_embeddings: 8 } },
});
const probe = await poisonedWebGpu("the EAGLE serving test");
probe.gpu?.destroy();
const EAGLE3: Speculation = { method: "eagle3", model: `${dir}/eagle3`, numTokens: 2, schedule: "constant" };
const EAGLE: Speculation = { method: "eagle", model: `${dir}/eagle`, numTokens: 2, schedule: "constant" };

type Options = Partial<ServerOptions>;

const answers = (o: Options) => servedAnswers({ modelPath, ...o }, "llama");

const cases: { name: string; o: Options; spec: Speculation; ignore?: boolean }[] = [
  { name: "eagle3, one engine", o: {}, spec: EAGLE3 },
  { name: "eagle, one engine", o: {}, spec: EAGLE },
  { name: "eagle3, --workers 2 as worker threads", o: { workers: 2, planner: "none", transport: "threads" }, spec: EAGLE3 },
  // Every prompt handed off: the head's cache moves with the model's to the decode worker.
  { name: "eagle3, --roles prefill,decode (every prompt handed off)", o: { workers: 2, roles: ["prefill", "decode"], planner: "none", router: "kv-aware", localPrefillTokens: 0 }, spec: EAGLE3 },
  { name: "eagle3, one engine on WebGPU", o: { backend: "webgpu" }, spec: EAGLE3, ignore: probe.skip },
  { name: "eagle3 (q/k norms, fc_norm, norm_output, a window, YaRN), one engine on WebGPU", o: { backend: "webgpu" }, spec: { ...EAGLE3, model: `${dir}/eagle3-variants` }, ignore: probe.skip },
];

const plain = new Map<string, Awaited<ReturnType<typeof answers>>>();
for (const c of cases) {
  test(`startServer({ speculative: ${c.name} }) answers as without drafts and counts them`, async () => {
    const key = JSON.stringify(c.o);
    if (!plain.has(key)) plain.set(key, await answers(c.o));
    const off = plain.get(key)!;
    const on = await answers({ ...c.o, speculative: c.spec });
    assert.deepEqual(on.texts, off.texts);
    assert.equal(on.streamed, off.texts[0]);
    assert.equal(off.drafted, 0);
    assert.ok(on.drafted > 0 && on.accepted <= on.drafted, `draft tokens ${on.drafted}, accepted ${on.accepted}`);
    // The repeated prompt may be served from the decode worker's cache; the other two are handed off.
    if (c.o.roles) assert.ok(on.handoffs >= 2 && on.handoffs === off.handoffs, `${on.handoffs} prompts handed off (${off.handoffs} without drafts)`);
  }, { ignore: c.ignore === true });
}

test("startServer({ speculative: eagle3 }) refuses a missing head and one the model's cache cannot hold, by name", async () => {
  const start = (spec: Speculation) => startServer({ modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, speculative: spec });
  await assert.rejects(start({ ...EAGLE3, model: `${dir}/none` }), /EAGLE head not found: ".*none"/);
  writeEagleHead(`${dir}/wide`, { method: "eagle3", seed: 23, kvHeads: 4 });
  await assert.rejects(start({ ...EAGLE3, model: `${dir}/wide` }), /has 4 key\/value heads of 8; its cache is the model's, of 2 heads of 8/);
});

test("Engine.warmUp() with speculative method eagle3 compiles the head's WebGPU kernels", async () => {
  await assertWarmUpCompilesDrafting(await loadModel(modelPath, { eagle: { method: "eagle3", path: EAGLE3.model! } }), EAGLE3);
}, { ignore: probe.skip });
