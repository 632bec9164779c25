/**
 * A cluster serving a model with recurrent state (a random Qwen3.5): a prefill worker hands each
 * prompt to a decode worker with its blocks and the state checkpoint before its last token, in-process
 * and between worker threads; a session's next turn pulled to a peer after its worker flipped to
 * prefill brings its checkpoint. Every answer is the one an engine alone gives.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createCluster, type CreateClusterOptions, startThreadCluster } from "../../src/cluster/create-cluster.ts";
import type { Cluster, RouteDecision } from "../../src/cluster/cluster.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { loadModel } from "../../src/model/load.ts";
import { type ModelFileSpec, writeTestGguf } from "../model/model-files.ts";
import { run } from "./fixtures.ts";

const SPEC: ModelFileSpec = {
  architecture: "qwen35", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 305,
  deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 4 },
};
const dir = mkdtempSync(`${tmpdir()}/recurrent-cluster-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const modelPath = await writeTestGguf(dir, "qwen35", SPEC);
const model = await loadModel(modelPath);
/** 37 tokens: two whole blocks of 16 and a partial one. */
const PROMPT = Array.from({ length: 37 }, (_, i) => (i * 37 + 11) % 290 + 5);
const greedy = (prompt: number[], maxTokens = 8): GenerateRequest => ({ prompt, maxTokens, temperature: 0, ignoreEos: true });
const ENGINE = { numBlocks: 64 } as const;

/** What one engine streams for each request in turn (the oracle), and the engine for more. */
async function alone(reqs: GenerateRequest[]): Promise<number[][]> {
  const e = createEngine(createReferenceBackend(), model, ENGINE);
  try {
    const out: number[][] = [];
    for (const r of reqs) out.push((await run(e, r)).streamed);
    return out;
  } finally {
    await e.stop();
  }
}

function cluster(o: Partial<CreateClusterOptions> & { workers: number }): Cluster {
  return createCluster(createReferenceBackend(), model, { planner: "none", engine: ENGINE, ...o });
}

test("Cluster hands a Qwen3.5's prompt from its prefill worker to its decode worker with the state checkpoint, answering as one engine does", async () => {
  const cl = cluster({ workers: 2, roles: ["prefill", "decode"], router: "kv-aware", routerOptions: { localPrefillThreshold: 0 } });
  try {
    const first = await run(cl, greedy(PROMPT));
    // The next turn: the prompt, its answer and a tool result, handed off again.
    const turn2 = [...PROMPT, ...first.streamed, 40, 41, 42, 43, 44, 45];
    const second = await run(cl, greedy(turn2));
    assert.deepEqual([first.streamed, second.streamed], await alone([greedy(PROMPT), greedy(turn2)]));
    assert.equal(cl.counters.prefillHandoffs, 2);
    // The decode worker resumed each from the checkpoint the prefill worker sent (after 32 of 37 tokens,
    // then where turn 2's last whole block before its last token ends), computing only the rest:
    // without the checkpoint, blocks alone give a recurrent model no hit.
    assert.equal(cl.workers[1].engine.stats().prefixHitTokens, 32 + Math.floor((turn2.length - 1) / 16) * 16);
  } finally {
    await cl.stop();
  }
});

test("Cluster pulls a Qwen3.5 session's prefix and its state checkpoint from the worker that flipped to prefill", async () => {
  const cl = cluster({ workers: 2, routerOptions: { peerMoveS: 0 } });
  try {
    const first = await run(cl, { ...greedy(PROMPT), sessionId: "s1" });
    const holder = cl.workers.findIndex((w) => w.engine.stats().prefixQueriedTokens > 0);
    const other = 1 - holder;
    cl.workers[holder].role = "prefill";
    const turn2 = [...PROMPT, ...first.streamed, 40, 41, 42, 43, 44, 45];
    const second = await run(cl, { ...greedy(turn2), sessionId: "s1" });
    assert.deepEqual(second.streamed, (await alone([greedy(turn2)]))[0]);
    assert.equal(cl.counters.prefixMoves, 1, "the prefix moved instead of being recomputed");
    assert.equal(cl.workers[other].engine.stats().prefixHitTokens, 32, "the peer resumed from the moved checkpoint");
    // The first turn computed 44 tokens: 2 whole blocks, the answer's checkpoint after 32.
    assert.equal(second.result.cachedTokens, 32);
  } finally {
    await cl.stop();
  }
});

test("startThreadCluster() hands a Qwen3.5's prompt between worker threads with its state checkpoint", async () => {
  const want = (await alone([greedy(PROMPT)]))[0];
  const routes: RouteDecision[] = [];
  const cl = await startThreadCluster(model, modelPath, "reference", {
    workers: 2, roles: ["prefill", "decode"], planner: "none", router: "kv-aware", routerOptions: { localPrefillThreshold: 0 }, engine: ENGINE,
    onRoute: (d) => routes.push(d),
  });
  try {
    const { streamed } = await run(cl, greedy(PROMPT));
    assert.deepEqual(streamed, want);
    assert.equal(cl.counters.prefillHandoffs, 1);
    assert.equal(cl.workers[1].engine.stats().prefixHitTokens, 32, "the decode thread resumed after 32 tokens, from the moved checkpoint");
    // Both threads told the router of their checkpoints after 32 tokens (the state events crossed): the
    // next turn's candidates count those 2 blocks, where without them a recurrent model counts none.
    await run(cl, greedy([...PROMPT, ...streamed, 40, 41, 42]));
    assert.deepEqual(routes.at(-1)!.candidates.map((c) => c.overlapDevice), [2, 2]);
  } finally {
    await cl.stop();
  }
});

test("Cluster's router counts a Qwen3.5 worker's cached prefix only as far as its state checkpoints reach", async () => {
  const routes: RouteDecision[] = [];
  // One checkpoint a worker: each turn's replaces the one before.
  const cl = cluster({ workers: 1, engine: { ...ENGINE, stateCheckpoints: 1 }, onRoute: (d) => routes.push(d) });
  try {
    const turn = async (prompt: number[], sessionId: string) => {
      const { streamed, result } = await run(cl, { ...greedy(prompt), sessionId });
      const seen = routes.at(-1)!.candidates[0].overlapDevice;
      // What the router took for cached is what the worker resumed from.
      assert.equal(seen * 16, result.cachedTokens, `${sessionId}: the router saw ${seen} blocks cached, the worker resumed after ${result.cachedTokens} tokens`);
      return { streamed, cached: result.cachedTokens };
    };
    const first = await turn(PROMPT, "s1");
    const turn2 = [...PROMPT, ...first.streamed, 40, 41, 42, 43, 44, 45];
    const other = await turn(PROMPT.map((t) => t + 1), "s2");
    // s1's blocks are still cached (64 blocks, 6 in use), its checkpoint is not: s2's took its place.
    const second = await turn(turn2, "s1");
    assert.equal(second.cached, 0);
    // Its turn's checkpoint after 48 tokens: the next turn resumes there, and s2's from nothing.
    assert.equal((await turn([...turn2, ...second.streamed, 9, 9, 9], "s1")).cached, 48);
    assert.equal((await turn([...PROMPT.map((t) => t + 1), ...other.streamed, 7], "s2")).cached, 0);
  } finally {
    await cl.stop();
  }
});
