/**
 * `serve --speculative-config '{"method": "mtp"}'` through the real openai client, on a random GLM-4.5
 * GGUF with a NextN block: the server loads the block (worker threads load their own), answers as
 * without drafts (greedy), and counts the block's drafts in /metrics; on WebGPU too, where the warm-up
 * compiles the block's kernels.
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
import { MTP_SPEC } from "../engine/mtp-fixtures.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { assertWarmUpCompilesDrafting, servedAnswers, type ServerOptions } from "./draft-server-fixtures.ts";

const dir = mkdtempSync(`${tmpdir()}/mtp-serve-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const modelPath = await writeTestGguf(dir, "glm", MTP_SPEC);
const probe = await poisonedWebGpu("the multi-token-prediction serving test");
probe.gpu?.destroy();
const MTP: Speculation = { method: "mtp", numTokens: 2 };

type Options = Partial<ServerOptions>;

const answers = (o: Options) => servedAnswers({ modelPath, ...o }, "glm");

const cases: { name: string; o: Options; ignore?: boolean }[] = [
  { name: "one engine", o: {} },
  { name: "--workers 2 as worker threads", o: { workers: 2, planner: "none", transport: "threads" } },
  // Every prompt handed off: the block's cache moves with the model's to the decode worker.
  { name: "--roles prefill,decode (every prompt handed off)", o: { workers: 2, roles: ["prefill", "decode"], planner: "none", router: "kv-aware", localPrefillTokens: 0 } },
  { name: "one engine on WebGPU", o: { backend: "webgpu" }, ignore: probe.skip },
];

for (const c of cases) {
  test(`startServer({ speculative: mtp }) with ${c.name} answers as without drafts and counts them`, async () => {
    const off = await answers(c.o);
    const on = await answers({ ...c.o, speculative: MTP });
    assert.deepEqual(on.texts, off.texts);
    assert.equal(on.streamed, off.texts[0]);
    assert.equal(off.drafted, 0);
    assert.ok(on.drafted > 0 && on.accepted <= on.drafted, `draft tokens ${on.drafted}, accepted ${on.accepted}`);
    if (c.o.roles) assert.ok(on.handoffs >= 3, `${on.handoffs} prompts handed off`);
  }, { ignore: c.ignore === true });
}

test("startServer({ speculative: mtp }) refuses a model without a multi-token-prediction block by name", async () => {
  const plain = await writeTestGguf(dir, "plain", { ...MTP_SPEC, nextn: 0, seed: 603 });
  await assert.rejects(startServer({ modelPath: plain, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, speculative: MTP }), /has no multi-token-prediction layers/);
});

test("Engine.warmUp() with speculative method mtp compiles the block's WebGPU kernels", async () => {
  await assertWarmUpCompilesDrafting(await loadModel(modelPath, { mtp: true }), MTP);
}, { ignore: probe.skip });
