/**
 * State checkpoints told to the control plane: StateCheckpoints names each written checkpoint by the
 * last block hash of its tokens (as routers hash prompts) when it is kept and when it goes, and an
 * engine serving a model with recurrent state publishes those changes as KvStateEvents, whose deepest
 * one within a prompt is as far as that engine then resumes it.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { chainHashes, GlobalBlockIndex, type KvEvent, namespaceRoot } from "../../kv/index.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { StateCheckpoints } from "../../src/engine/state-checkpoints.ts";
import { loadModel } from "../../src/model/load.ts";
import { type ModelFileSpec, writeTestGguf } from "../model/model-files.ts";

const tail = (tokens: number[], bs: number, root: number | null = null) => chainHashes(tokens, bs, undefined, root).at(-1)!;

test("StateCheckpoints tells onChange each written checkpoint's last block hash as it is kept and as it goes", () => {
  const told: [number, boolean][] = [];
  const cps = new StateCheckpoints(2, 4, undefined, (hash, kept) => told.push([hash, kept]));
  const root = namespaceRoot("adapter");
  const a = cps.reserve([1, 2, 3, 4, 5, 6, 7, 8], "s1", root)!;
  assert.deepEqual(told, [], "pending: not there to restore from yet");
  cps.settle(a);
  assert.deepEqual(told, [[tail([1, 2, 3, 4, 5, 6, 7, 8], 4, root), true]]);
  // A decoding sequence's checkpoint moves on a block at a time: the old one goes, the new one's hash
  // (chained on from the old one's) is the whole chain's.
  const seq = [9, 9, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8];
  const d = cps.reserveDecode(7, 8)!;
  cps.settle(d, seq.slice(0, 8));
  told.length = 0;
  assert.equal(cps.reserveDecode(7, 12), d);
  assert.deepEqual(told, [[tail(seq.slice(0, 8), 4), false]]);
  cps.settle(d, seq);
  assert.deepEqual(told[1], [tail(seq, 4), true]);
  // A pending one replaced, or dropped, was never told; a written one taken for another, or dropped, is.
  told.length = 0;
  const b = cps.reserve([4, 4, 4, 4])!;
  assert.equal(b, a, "the least recently used goes");
  assert.deepEqual(told, [[tail([1, 2, 3, 4, 5, 6, 7, 8], 4, root), false]]);
  cps.drop(b);
  cps.drop(d);
  assert.deepEqual(told.slice(1), [[tail(seq, 4), false]]);
  // Without onChange nothing is hashed or told, and matching is as before.
  const quiet = new StateCheckpoints(1, 4);
  quiet.settle(quiet.reserve([1, 2, 3, 4])!);
  assert.deepEqual(quiet.longest([1, 2, 3, 4, 5], 4)?.length, 4);
});

const SPEC: ModelFileSpec = {
  architecture: "qwen35", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 309,
  deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 4 },
};
const dir = mkdtempSync(`${tmpdir()}/state-events-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const model = await loadModel(await writeTestGguf(dir, "qwen35", SPEC));

test("Engine with Gated DeltaNet layers publishes its state checkpoints, and a prompt's deepest one is as far as its next turn resumes", async () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, blockSize: 4, stateCheckpoints: 1, workerId: "w1" });
  const index = new GlobalBlockIndex();
  const states: KvEvent[] = [];
  e.kvEvents.subscribe((ev) => {
    index.apply(ev);
    if (ev.kind === "state") states.push(ev);
  });
  try {
    const prompt = [5, 9, 44, 120, 7, 3, 88, 19, 250, 6, 61, 2, 17, 33, 140, 71, 8, 200, 4, 11, 99];
    const first = await e.submit({ prompt, maxTokens: 10, temperature: 0, ignoreEos: true }).result;
    const turn2 = [...prompt, ...first.tokenIds, 40, 41, 42];
    const chain = chainHashes(turn2, 4);
    // The prompt's checkpoint after 20 tokens, replaced by the answer's after 24, moved on to 28 (30 tokens computed).
    const told = () => states.map((s) => s.kind === "state" && [chain.indexOf(s.hash) + 1, s.kept]);
    assert.deepEqual(told(), [[5, true], [5, false], [6, true], [6, false], [7, true]]);
    assert.ok(states.every((s) => s.workerId === "w1"));
    assert.deepEqual(index.overlaps(chain, true).get("w1"), { device: 7, deviceOrHost: 7 });
    const other = await e.submit({ prompt: [7, 7, 1, 254, 3, 3, 3, 3, 9], maxTokens: 1, temperature: 0, ignoreEos: true }).result;
    assert.equal(other.finishReason, "length");
    // Its checkpoint took the only place: the session's blocks are all still cached, but without a
    // state to resume from they are no hit, which is what the stateful overlap says.
    assert.deepEqual(told().slice(5), [[7, false], [0, true]]);
    assert.deepEqual(index.overlaps(chain).get("w1"), { device: 7, deviceOrHost: 7 });
    assert.equal(index.overlaps(chain, true).get("w1"), undefined);
    const second = await e.submit({ prompt: turn2, maxTokens: 1, temperature: 0, ignoreEos: true }).result;
    assert.equal(second.cachedTokens, 0);
    // Its prompt's checkpoint after 32 tokens is kept now: a third turn resumes there.
    const turn3 = [...turn2, ...second.tokenIds, 50, 51, 52, 53];
    assert.deepEqual(index.overlaps(chainHashes(turn3, 4), true).get("w1"), { device: 8, deviceOrHost: 8 });
    assert.equal((await e.submit({ prompt: turn3, maxTokens: 1, temperature: 0, ignoreEos: true }).result).cachedTokens, 8 * 4);
  } finally {
    await e.stop();
  }
});
