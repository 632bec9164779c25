/**
 * LoRA adapters in a cluster (Cluster.loadAdapter): every worker loads the adapter (a worker thread
 * reads its file itself and must find the same one), a request for it generates what the merged
 * weights generate whether one worker runs it or a prefill worker hands its KV to a decode worker,
 * the router looks prompts up in the adapter's cache namespace, and unloads wait for requests.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createCluster, startThreadCluster } from "../../src/cluster/create-cluster.ts";
import type { Cluster } from "../../src/cluster/cluster.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { LoraAdapterError } from "../../src/engine/engine-adapters.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { eventually } from "../eventually.ts";
import { test } from "../harness.ts";
import { loraGgufBytes, mergeLora } from "../model/lora-files.ts";
import { greedy, model, modelPath, run, STORY } from "./fixtures.ts";

const dir = mkdtempSync(`${tmpdir()}/lora-cluster-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const c = model.config;
const targets = Array.from({ length: c.numLayers }, (_, layer) => (["wq", "wk", "wv", "wo", "wUp", "wDown"] as const).map((target) => ({ layer, target }))).flat();
const path = `${dir}/a.gguf`;
await writeFile(path, loraGgufBytes(c, { seed: 31, rank: 8, alpha: 16, targets, magnitude: 0.5 }));
const adapter = await loadLoraAdapter(path, c);

const merged = await (async () => {
  const e = createEngine(createReferenceBackend(), mergeLora(model, adapter), { numBlocks: 64 });
  try {
    return (await run(e, greedy(STORY))).streamed;
  } finally {
    await e.stop();
  }
})();
const base = await (async () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  try {
    return (await run(e, greedy(STORY))).streamed;
  } finally {
    await e.stop();
  }
})();

async function check(cl: Cluster): Promise<void> {
  await cl.loadAdapter("a", adapter);
  assert.deepEqual(cl.adapterNames(), ["a"]);
  assert.ok(cl.workers.every((w) => w.adapters.has("a")));
  const { streamed } = await run(cl, { ...greedy(STORY), adapter: "a" });
  assert.deepEqual(streamed, merged, "the adapter's request generates what the merged weights do");
  assert.notDeepEqual(merged, base);
  assert.equal(cl.counters.prefillHandoffs, 1, "its prefill ran on the prefill worker and its KV moved");
  assert.ok(cl.counters.movedBlocks > 0);
  // Its blocks, the last one too, landed in the adapter's namespace on the decode worker, which
  // computed only the last prompt token again (as for a base-model hand-off).
  // (A thread worker's gauges come with its next report: poll, with a deadline only against a hang.)
  await eventually(() => cl.workers[1].engine.stats().prefixHitTokens, (n) => n !== 0);
  assert.equal(cl.workers[1].engine.stats().prefixHitTokens, STORY.length - 1);
  // The base model's request for the same prompt does not reuse the adapter's KV anywhere.
  const plain = await run(cl, greedy(STORY));
  assert.deepEqual(plain.streamed, base);
  assert.equal(plain.result.cachedTokens, 0);
  // Unloading waits for the adapter's requests.
  const h = cl.submit({ ...greedy(STORY, 40), adapter: "a" });
  await assert.rejects(cl.unloadAdapter("a"), (e: Error) => e instanceof LoraAdapterError && /in use by 1 request/.test(e.message));
  await h.result;
  await cl.unloadAdapter("a");
  assert.deepEqual(cl.adapterNames(), []);
  assert.ok(cl.workers.every((w) => !w.adapters.has("a")));
  assert.throws(() => cl.submit({ ...greedy(STORY), adapter: "a" }), (e: Error) => e instanceof LoraAdapterError && e.notFound);
}

test("Cluster.loadAdapter() on in-process workers: an adapter's prefill hands its KV to the decode worker in its namespace", async () => {
  const cl = createCluster(createReferenceBackend(), model, {
    workers: 2, roles: ["prefill", "decode"], planner: "none", router: "kv-aware", routerOptions: { localPrefillThreshold: 0 }, engine: { numBlocks: 64 },
  });
  try {
    await check(cl);
  } finally {
    await cl.stop();
  }
});

test("Cluster.loadAdapter() on worker threads: each reads the adapter file and serves it", async () => {
  const cl = await startThreadCluster(model, modelPath, "reference", {
    workers: 2, roles: ["prefill", "decode"], planner: "none", router: "kv-aware", routerOptions: { localPrefillThreshold: 0 }, engine: { numBlocks: 64 },
  });
  try {
    await check(cl);
    // A worker that finds another adapter at the path refuses it, and no worker keeps it.
    const other = `${dir}/other.gguf`;
    await writeFile(other, loraGgufBytes(c, { seed: 32, rank: 2, alpha: 0, targets: targets.slice(0, 2) }));
    const claimed = { ...(await loadLoraAdapter(other, c)), fingerprint: adapter.fingerprint.replace(/^./, (x) => (x === "0" ? "1" : "0")) };
    await assert.rejects(cl.loadAdapter("b", claimed), (e: Error) => e instanceof LoraAdapterError && /differs from the server's/.test(e.message));
    assert.deepEqual(cl.adapterNames(), []);
  } finally {
    await cl.stop();
  }
});

test("Cluster.unloadAdapter() while its load is under way: no worker keeps the adapter, and the name loads again", async () => {
  const clusters = [
    createCluster(createReferenceBackend(), model, { workers: 2, planner: "none", engine: { numBlocks: 64 } }),
    await startThreadCluster(model, modelPath, "reference", { workers: 2, planner: "none", engine: { numBlocks: 64 } }),
  ];
  for (const cl of clusters) {
    try {
      for (const wait of [0, 1, 5]) {
        // The unload comes before, while or after the workers load it (a thread reads the file meanwhile).
        const load = cl.loadAdapter("a", adapter);
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        await cl.unloadAdapter("a");
        await load;
        assert.deepEqual(cl.adapterNames(), []);
        assert.ok(cl.workers.every((w) => !w.adapters.has("a")));
        // Before the fix a worker still loading it kept it, and refused the name from then on.
        await cl.loadAdapter("a", adapter);
        assert.ok(cl.workers.every((w) => w.adapters.has("a")));
        const { streamed } = await run(cl, { ...greedy(STORY), adapter: "a" });
        assert.deepEqual(streamed, merged);
        await cl.unloadAdapter("a");
      }
    } finally {
      await cl.stop();
    }
  }
});
