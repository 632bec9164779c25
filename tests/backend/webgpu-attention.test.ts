/**
 * How the WebGPU attention kernel splits a KV group's query heads among workgroups. Its outputs are
 * checked against the reference in the conformance suite (conformance-cases-attention.ts, whose
 * geometries include groups split into several workgroups); this checks the split itself.
 */
import assert from "node:assert/strict";
import { attentionHeadsPerGroup, MAX_HEAD_DIM } from "../../src/backend/webgpu/ops-attention.ts";
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
