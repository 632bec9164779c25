/**
 * Hunt 5 over a cluster's LoRA adapters: a worker that joins while a load of a name waits for that
 * name's unload to end loads the adapter once, and the load succeeds on every worker.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createCluster } from "../../src/cluster/create-cluster.ts";
import { localWorkerEngine } from "../../src/cluster/worker-engine.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { loraGgufBytes } from "../model/lora-files.ts";
import { greedy, model, run, STORY } from "./fixtures.ts";

const dir = mkdtempSync(`${tmpdir()}/lora-cluster-hunt5-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const path = `${dir}/a.gguf`;
await writeFile(path, loraGgufBytes(model.config, { seed: 51, rank: 4, alpha: 8, targets: [{ layer: 0, target: "wq" }, { layer: 1, target: "wv" }], magnitude: 0.5 }));
const adapter = await loadLoraAdapter(path, model.config);

test("a worker joining while a reload of a name waits on its unload loads it once, and the reload succeeds", async () => {
  const cl = createCluster(createReferenceBackend(), model, { workers: 1, planner: "none", engine: { numBlocks: 64 } });
  try {
    await cl.loadAdapter("a", adapter);
    const unload = cl.unloadAdapter("a");
    const reload = cl.loadAdapter("a", adapter);
    const joined = cl.addWorker(localWorkerEngine(createEngine(createReferenceBackend(), model, { numBlocks: 64, workerId: "late" })));
    await unload;
    await reload;
    assert.deepEqual(cl.adapterNames(), ["a"]);
    assert.ok(cl.workers.every((w) => w.adapters.has("a")), "every worker serves it");
    assert.ok(joined.adapters.has("a"));
    const { streamed } = await run(cl, { ...greedy(STORY), adapter: "a" });
    assert.ok(streamed.length > 0);
  } finally {
    await cl.stop();
  }
});
