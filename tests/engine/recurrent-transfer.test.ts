/**
 * A model with recurrent state (a random Qwen3.5) moving a cached prefix between engines: the sender's
 * longest state checkpoint within the prefix goes with its blocks (PrefixKv.state), so the receiver's
 * next turn resumes from it as the sender's would, with the same tokens; a prompt prefilled for a
 * hand-off keeps its checkpoint before its last token, which the decoding engine computes again; a
 * state that does not fit the model is refused before anything is written.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { allocatePagedKv, stateShapes } from "../../src/engine/kv-cache.ts";
import { type PrefixKv, PrefixTransferError } from "../../src/engine/prefix-transfer.ts";
import { StateCheckpoints } from "../../src/engine/state-checkpoints.ts";
import { StateImports } from "../../src/engine/state-import.ts";
import type { StepRunner } from "../../src/engine/engine-runner-types.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { loadModel } from "../../src/model/load.ts";
import { greedySteps } from "../oracle/oracle-compare.ts";
import { type ModelFileSpec, writeTestGguf } from "../model/model-files.ts";

const SPEC: ModelFileSpec = {
  architecture: "qwen35", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 303,
  deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 4 },
};
const dir = mkdtempSync(`${tmpdir()}/recurrent-transfer-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const model = await loadModel(await writeTestGguf(dir, "qwen35", SPEC));
const backend = createReferenceBackend();
const TURN1 = [5, 9, 44, 120, 7, 3, 88, 19, 250, 6, 61, 2, 17, 33, 140, 71, 8, 200, 4, 11, 99];
const MAX_TOKENS = 10;
const ENGINE = { numBlocks: 64, blockSize: 4 } as const;

/** The greedy tokens of `prompt` from a lone forward. */
async function loneGreedy(prompt: number[]): Promise<number[]> {
  const kv = allocatePagedKv(backend, model.config, 24, 4);
  return (await greedySteps(backend, uploadModel(backend, model), kv, prompt, MAX_TOKENS, Array.from({ length: 24 }, (_, i) => i))).tokens;
}

const greedy = { maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true } as const;

test("Engine.exportPrefix() sends a Qwen3.5's state checkpoint with its blocks, and the importing engine's next turn resumes from it", async () => {
  const sender = createEngine(backend, model, ENGINE);
  const receiver = createEngine(backend, model, ENGINE);
  const bare = createEngine(backend, model, ENGINE);
  try {
    // Turn 1 computes 30 tokens (21 prompt, 9 of its 10 answer tokens fed back): 7 whole blocks, the answer's checkpoint after 28.
    const out1 = (await sender.submit({ prompt: TURN1, ...greedy }).result).tokenIds;
    const turn2 = [...TURN1, ...out1, 150, 151, 152, 153, 154, 155, 156];
    const prefix = await sender.exportPrefix(turn2);
    assert.ok(prefix !== null);
    assert.equal(prefix.tokens.length, 28);
    assert.equal(prefix.state?.tokens, 28, "the answer's checkpoint, the longest within the blocks");
    const shapes = stateShapes(model.config);
    assert.deepEqual(prefix.state.values.conv.map((a) => a.length), shapes.conv.map(([k, c]) => k * c));
    assert.equal(receiver.importPrefix(prefix, "agent-1"), 7);
    const want = await loneGreedy(turn2);
    const r = await receiver.submit({ prompt: turn2, ...greedy }).result;
    assert.deepEqual(r.tokenIds, want, "resumed from the moved state, the tokens are a whole prefill's");
    assert.equal(r.cachedTokens, 28);
    assert.equal(receiver.checkpoints?.restores, 1);
    // The same blocks without the state: nothing to resume from, so nothing is taken, and the tokens are the same.
    const { state: _, ...blocksOnly } = prefix;
    bare.importPrefix(blocksOnly);
    const b = await bare.submit({ prompt: turn2, ...greedy }).result;
    assert.deepEqual(b.tokenIds, want);
    assert.equal(b.cachedTokens, 0);
  } finally {
    for (const e of [sender, receiver, bare]) await e.stop();
  }
});

for (const length of [21, 20]) {
  test(`Engine with Gated DeltaNet layers: a prompt of ${length} tokens prefilled for a hand-off keeps its checkpoint before its last token, where the decoding engine resumes`, async () => {
    // Blocks of 4: the decoding engine computes the prompt's last token again for its logits, so its
    // hit covers the whole blocks of the first length - 1 tokens (20 of 21; 16 of 20), where the
    // prefill's checkpoint must end for it to be of use there.
    const prompt = TURN1.slice(0, length);
    const at = Math.floor((length - 1) / 4) * 4;
    const prefill = createEngine(backend, model, ENGINE);
    const decode = createEngine(backend, model, ENGINE);
    try {
      const p = await prefill.submit({ prompt, maxTokens: 1, temperature: 0, prefillOnly: true }).result;
      assert.equal(p.finishReason, "prefill_done", p.error);
      const moved = await prefill.exportPrefix(prompt, true);
      assert.equal(moved?.state?.tokens, at);
      decode.importPrefix(moved!);
      const r = await decode.submit({ prompt, ...greedy }).result;
      assert.deepEqual(r.tokenIds, await loneGreedy(prompt));
      assert.equal(r.cachedTokens, at);
      assert.equal(decode.checkpoints?.restores, 1);
    } finally {
      await prefill.stop();
      await decode.stop();
    }
  });
}

test("Engine.importPrefix() refuses a recurrent state that does not fit the model or the prefix, before writing anything", async () => {
  const sender = createEngine(backend, model, ENGINE);
  const receiver = createEngine(backend, model, ENGINE);
  try {
    await sender.submit({ prompt: TURN1, ...greedy }).result;
    const prefix = (await sender.exportPrefix(TURN1))!;
    assert.equal(prefix.state?.tokens, 20);
    const bad: [PrefixKv, RegExp][] = [
      [{ ...prefix, state: { tokens: 20, values: { conv: prefix.state!.values.conv.slice(1), ssm: prefix.state!.values.ssm } } }, /The recurrent state sent does not fit this model's: convolution states of \[/],
      [{ ...prefix, state: { tokens: 20, values: { ...prefix.state!.values, ssm: [new Float32Array(3)] } } }, /does not fit this model's/],
      [{ ...prefix, state: { ...prefix.state!, tokens: 18 } }, /A recurrent state after 18 tokens does not fit a prefix of 20 tokens in blocks of 4/],
      [{ ...prefix, state: { ...prefix.state!, tokens: 24 } }, /after 24 tokens does not fit a prefix of 20 tokens/],
    ];
    for (const [p, pattern] of bad) assert.throws(() => receiver.importPrefix(p), (e: unknown) => e instanceof PrefixTransferError && pattern.test(e.message));
    // The good one still goes in, every block of it (none was written before), and serves.
    assert.equal(receiver.importPrefix(prefix), 5);
    const r = await receiver.submit({ prompt: [...TURN1, 1, 2], ...greedy }).result;
    assert.equal(r.cachedTokens, 20);
    assert.deepEqual(r.tokenIds, await loneGreedy([...TURN1, 1, 2]));
  } finally {
    await sender.stop();
    await receiver.stop();
  }
});

test("StateCheckpoints.hold() keeps a checkpoint from being taken until let go, unless every written one is held", () => {
  const cps = new StateCheckpoints(2, 4);
  const a = cps.reserve([1, 2, 3, 4])!;
  cps.settle(a);
  const b = cps.reserve([5, 6, 7, 8])!;
  cps.settle(b);
  // a is the older, but held: b goes first.
  const release = cps.hold(a);
  assert.equal(cps.reserve([9, 9, 9, 9]), b);
  cps.settle(b);
  // Where every written one is held, the least recently used of them goes.
  const releaseB = cps.hold(b);
  assert.equal(cps.reserve([8, 8, 8, 8]), a, "all are held: the oldest goes");
  cps.settle(a);
  // Let go (once, however often it is called), a checkpoint is an ordinary one again.
  releaseB();
  releaseB();
  release();
  cps.touch(a);
  assert.equal(cps.reserve([7, 7, 7, 7]), b, "held no more: the least recently used goes");
});

test("StateImports.apply() writes a batch of moved states without one taking another's place, and waiting prompts keep theirs", () => {
  const cps = new StateCheckpoints(2, 4);
  const written: number[] = [];
  const runner = { writeState: (id: number) => void written.push(id) } as unknown as StepRunner;
  const shapes = { conv: [[3, 2]], ssm: [] };
  const state = (tokens: number) => ({ tokens, values: { conv: [new Float32Array(6)], ssm: [] } });
  let held: (() => void) | undefined;
  // A waiting prompt holds the checkpoint it would resume from once the batch is written.
  const imports = new StateImports(cps, runner, shapes, () => (held = cps.hold(cps.longest([1, 2, 3, 4, 5], 4)!.id)));
  const old = cps.reserve([9, 9, 9, 9])!;
  cps.settle(old);
  imports.queue({ tokens: [1, 2, 3, 4], blockSize: 4, kv: { numTokens: 0, k: [], v: [] } as unknown as PrefixKv["kv"], state: state(4) });
  imports.queue({ tokens: [5, 6, 7, 8], blockSize: 4, kv: { numTokens: 0, k: [], v: [] } as unknown as PrefixKv["kv"], state: state(4) });
  assert.equal(imports.apply(), 2);
  assert.deepEqual(cps.longest([1, 2, 3, 4, 5], 4)?.length, 4, "the first of the batch was not taken by the second");
  assert.equal(cps.longest([9, 9, 9, 9, 9], 4), undefined, "the old one made room");
  // The second is wanted by no waiting prompt: a new checkpoint takes it, not the held first one.
  const next = cps.reserve([7, 7, 7, 7])!;
  assert.equal(cps.longest([5, 6, 7, 8, 9], 4), undefined);
  cps.settle(next);
  assert.equal(cps.longest([1, 2, 3, 4, 5], 4)?.length, 4);
  held!();
  assert.throws(() => imports.queue({ tokens: [1, 2, 3, 4], blockSize: 4, kv: { numTokens: 0, k: [], v: [] } as unknown as PrefixKv["kv"], state: { tokens: 4, values: { conv: [new Float32Array(5)], ssm: [] } } }), PrefixTransferError);
});
