/**
 * The multi-token-prediction block's pass after each step (mtp-drafts.ts), through the model's step
 * runner: its cache after a prompt in chunks is its cache after the prompt in one step (each chunk's
 * last row takes the next chunk's first token), and a sequence's draft starts at the row of its last
 * kept token, chained from there (from that row's hidden state: as if the kept tokens were fed plainly),
 * past the sequence's blocks into the reserved ones.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { GREEDY_ROW, modelStepRunner } from "../../src/engine/engine-runner.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import type { StepEntry } from "../../src/engine/scheduler-types.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { loadModel } from "../../src/model/load.ts";
import { writeTestGguf } from "../model/model-files.ts";
import { greedySteps } from "../oracle/oracle-compare.ts";
import { exactMtpModel, MTP_SPEC } from "./mtp-fixtures.ts";

const dir = mkdtempSync(`${tmpdir()}/mtp-runner-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const model = await loadModel(await writeTestGguf(dir, "glm", MTP_SPEC), { mtp: true });
const backend = createReferenceBackend();
const PROMPT = [5, 9, 44, 120, 7, 3, 88, 19, 250, 6, 61, 2, 17];

const entry = (tokens: number[], startPos: number, sample: boolean, draft?: number): StepEntry => ({
  seqId: 1, tokens, startPos, blockTable: [0, 1, 2, 3], sample, prefill: startPos === 0 || !sample, ...(draft ? { draft } : {}),
});

test("modelStepRunner() keeps the block's cache through a prompt's chunks as one step writes it", async () => {
  const device = uploadModel(backend, model);
  const caches = [];
  for (const split of [undefined, 5, 9]) {
    const kv = allocatePagedKv(backend, model.config, 4, 4);
    const runner = modelStepRunner(backend, device, kv);
    const mtp = (sample: boolean, next?: number) => ({ tokens: 1, draft: [sample], next: [next] });
    let sampled;
    if (split === undefined) sampled = await runner.run([entry(PROMPT, 0, true)], [GREEDY_ROW], { mtp: mtp(true) });
    else {
      // The first chunk is not read (nothing samples), as the engine runs it.
      await runner.run([entry(PROMPT.slice(0, split), 0, false)], [GREEDY_ROW], { mtp: mtp(false, PROMPT[split]), unread: true });
      sampled = await runner.run([entry(PROMPT.slice(split), split, true)], [GREEDY_ROW], { mtp: mtp(true) });
    }
    assert.equal(sampled.mtpDrafts?.[0]?.length, 1);
    const last = kv.k.length - 1;
    caches.push({ k: (await backend.download(kv.k[last])) as Float32Array, v: (await backend.download(kv.v[last])) as Float32Array, draft: sampled.mtpDrafts![0]![0], token: sampled.ids[0] });
  }
  // Positions 0..12 of blocks 0..3 (4 positions each, 2 heads of 16).
  const used = PROMPT.length * 2 * 16;
  for (const c of caches.slice(1)) {
    assert.equal(c.token, caches[0].token);
    assert.equal(c.draft, caches[0].draft);
    for (const [a, b] of [[c.k, caches[0].k], [c.v, caches[0].v]]) {
      let worst = 0;
      for (let i = 0; i < used; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
      assert.ok(worst < 1e-5, `largest difference ${worst}`);
    }
  }
  // A cache the block never wrote differs: the comparison can fail.
  assert.ok(caches[0].k.subarray(0, used).some((x) => x !== 0));
});

test("modelStepRunner() drafts from the row of a sequence's last kept token, chained past its blocks", async () => {
  const exact = exactMtpModel(model);
  const device = uploadModel(backend, exact);
  // 4 blocks for tables, 1 reserved past them for chained positions.
  const kv = allocatePagedKv(backend, exact.config, 5, 4);
  kv.reserved = 1;
  const runner = modelStepRunner(backend, device, kv);
  assert.equal(runner.numBlocks, 4);
  // The exact block's target predicts from the last token alone: its greedy chain is next(next(…)).
  const prompt = PROMPT.slice(0, 13);
  const first = await runner.run([entry(prompt, 0, true)], [GREEDY_ROW], { mtp: { tokens: 3, draft: [true], next: [undefined] } });
  const t = first.ids[0];
  const chain = [t, ...first.mtpDrafts![0]!];
  assert.equal(chain.length, 4);
  // A draft of two at positions 14..15 (where the table ends): the first right, the second wrong.
  const wrong = (chain[2] + 1) % 300;
  const verify = await runner.run([entry([t, chain[1], wrong], 13, true, 2)], [GREEDY_ROW], {
    drafts: [[GREEDY_ROW, GREEDY_ROW]], mtp: { tokens: 3, draft: [true], next: [undefined] },
  });
  const samples = verify.draftIds![0]!;
  assert.equal(samples[0], chain[1], "the right draft token is the target's own");
  assert.equal(samples[1], chain[2], "the target's token where the draft is wrong");
  // Kept: chain[1] (position 14); chain[2] is the sequence's next token. The draft follows it: from
  // the block's row at position 14, chained at positions 15 and 16, past the table into the reserved block.
  const next = Array.from(verify.mtpDrafts![0]!);
  const far = await runner.run([entry([chain[2]], 15, true)], [GREEDY_ROW], { mtp: { tokens: 2, draft: [true], next: [undefined] } });
  assert.deepEqual(next, [far.ids[0], ...far.mtpDrafts![0]!], "the chain the next token alone gives");
  const over = await runner.run([entry([chain[2]], 15, true)], [GREEDY_ROW], { mtp: { tokens: 6, draft: [true], next: [undefined] } }).catch((e) => e);
  assert.ok(over instanceof RangeError && /reserves blocks for 0/.test(over.message), "six tokens reach two blocks past a table: more than is reserved");
});

test("modelStepRunner() drafts after a partly kept draft as after the kept tokens fed plainly", async () => {
  // A random block: its chained drafts follow the hidden state of the row they start from.
  const device = uploadModel(backend, model);
  const prompt = PROMPT.slice(0, 13);
  const greedy = (await greedySteps(backend, device, allocatePagedKv(backend, model.config, 5, 4), prompt, 3, [0, 1, 2, 3, 4])).tokens;
  const [t, d1, after] = greedy;
  const ask = { mtp: { tokens: 3, draft: [true], next: [undefined] } };
  const runnerWith = () => {
    const kv = allocatePagedKv(backend, model.config, 5, 4);
    kv.reserved = 1;
    return modelStepRunner(backend, device, kv);
  };
  const [a, b] = [runnerWith(), runnerWith()];
  for (const r of [a, b]) assert.equal((await r.run([entry(prompt, 0, true)], [GREEDY_ROW], ask)).ids[0], t);
  // A verifies [d1, wrong]: d1 is kept, `after` is its next token; B feeds t and d1 as a plain chunk.
  const verified = await a.run([entry([t, d1, (after + 1) % 300], 13, true, 2)], [GREEDY_ROW], { ...ask, drafts: [[GREEDY_ROW, GREEDY_ROW]] });
  const plain = await b.run([entry([t, d1], 13, true)], [GREEDY_ROW], ask);
  assert.deepEqual(Array.from(verified.draftIds![0]!), [d1, after]);
  assert.equal(plain.ids[0], after);
  assert.equal(verified.mtpDrafts![0]!.length, 3);
  assert.deepEqual(Array.from(verified.mtpDrafts![0]!), Array.from(plain.mtpDrafts![0]!));
});
