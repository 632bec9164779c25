/**
 * How the WebGPU attention kernel splits its work among workgroups: a KV group's query heads, and a
 * row's keys (split-KV). Its outputs are checked against the reference in the conformance suite
 * (conformance-cases-attention.ts, whose geometries include groups split into several workgroups and
 * rows over contexts long enough to be split into spans); this checks the splits themselves.
 */
import assert from "node:assert/strict";
import { attentionHeadsPerGroup, attentionSplits, MAX_HEAD_DIM } from "../../src/backend/webgpu/ops-attention.ts";
import { test } from "../harness.ts";

test("attentionHeadsPerGroup() takes the largest divisor of the group that fits a workgroup", () => {
  // Llama 3 (32 over 8), stories260K (8 over 4), MLA (many heads over one 576-wide latent).
  assert.equal(attentionHeadsPerGroup(32, 8, 64), 4);
  assert.equal(attentionHeadsPerGroup(8, 4, 8), 2);
  assert.equal(attentionHeadsPerGroup(16, 1, 576), 2);
  assert.equal(attentionHeadsPerGroup(12, 1, 128), 6);
  assert.equal(attentionHeadsPerGroup(7, 1, 64), 7);
  assert.equal(attentionHeadsPerGroup(4, 4, 64), 1);
  for (const headDim of [2, 8, 40, 64, 128, 256, 300, MAX_HEAD_DIM]) {
    for (let group = 1; group <= 40; group++) {
      const h = attentionHeadsPerGroup(group * 2, 2, headDim);
      const fits = (k: number) => group % k === 0 && k <= 8 && k * headDim <= 2048;
      assert.ok(h === 1 || fits(h), `group ${group} × headDim ${headDim}: ${h} heads do not fit`);
      for (let k = h + 1; k <= group; k++) assert.ok(!fits(k), `group ${group} × headDim ${headDim}: ${k} heads fit, ${h} taken`);
    }
  }
});

test("attentionSplits() cuts a row's keys into spans only where a dispatch has few workgroups", () => {
  // A batch-1 decode of Llama 3 (8 workgroups) over 4096 keys: 16 spans of 256; Gemma 3 1B's one
  // workgroup: 32 spans (the most) of 128 → at least 256 keys each, so 16 of 256.
  assert.deepEqual(attentionSplits(8, 4096), { splits: 16, span: 256 });
  assert.deepEqual(attentionSplits(1, 4096), { splits: 16, span: 256 });
  assert.deepEqual(attentionSplits(1, 100_000), { splits: 32, span: 3136 });
  // Enough workgroups already (a prefill chunk, a large batch), or a context too short to split.
  assert.equal(attentionSplits(128, 100_000).splits, 1);
  assert.equal(attentionSplits(512, 4096).splits, 1);
  assert.equal(attentionSplits(1, 511).splits, 1);
  // A CPU adapter's target, its threads: two spans for one workgroup, none for two.
  assert.deepEqual(attentionSplits(1, 4096, 2), { splits: 2, span: 2048 });
  assert.equal(attentionSplits(2, 4096, 2).splits, 1);
  for (const groups of [1, 3, 8, 50, 127]) {
    for (const reach of [256, 257, 600, 1900, 4096, 33_000]) {
      const { splits, span } = attentionSplits(groups, reach);
      if (splits === 1) continue;
      assert.ok(splits <= 32 && span % 64 === 0 && span >= 256, `${groups} × ${reach}: ${splits} spans of ${span}`);
      assert.ok(splits * span >= reach && (splits - 1) * span < reach, `${groups} × ${reach}: ${splits} spans of ${span} do not cover the keys, each one used`);
      assert.ok(groups * splits <= 2 * 128, `${groups} × ${reach}: ${splits} spans make ${groups * splits} workgroups`);
    }
  }
});
