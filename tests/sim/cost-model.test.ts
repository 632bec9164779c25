import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { CostModel } from "../../src/sim/cost-model.ts";
import { GB300, H200, KIMI_K2_6 } from "../../src/sim/profiles.ts";

test("CostModel.stepTime() is compute-bound for big prefills and bandwidth-bound for decode", () => {
  const m = new CostModel(KIMI_K2_6, GB300, 8);
  const pre = m.work({ prefillTokens: 16384, prefillAttnPairs: m.prefillPairs(0, 16384), decodeSeqs: 0, decodeAttnTokens: 0 });
  const flopS = pre.flops / (8 * GB300.peakFlops * GB300.flopEfficiency);
  const byteS = pre.bytes / (8 * GB300.hbmBandwidth * GB300.bandwidthEfficiency);
  assert.ok(flopS > byteS, "16k-token prefill is compute-bound");
  const dec = m.work({ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 1, decodeAttnTokens: 8192 });
  assert.ok(dec.bytes / (8 * GB300.hbmBandwidth) > dec.flops / (8 * GB300.peakFlops), "batch-1 decode is bandwidth-bound");
  // One decode token reads the dense weights and ≈ k/E of the experts, not the whole model.
  assert.ok(dec.bytes < 0.1 * KIMI_K2_6.totalParams, `bytes ${dec.bytes}`);
  const t1 = m.stepTime({ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 64, decodeAttnTokens: 64 * 8192 });
  const t2 = m.stepTime({ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 128, decodeAttnTokens: 128 * 8192 });
  assert.ok(t2 > t1 && t2 < 2 * t1, "larger batches amortise weight reads");
});

test("CostModel.calibrate() recovers efficiencies and overhead from measured steps", () => {
  const truth = new CostModel(KIMI_K2_6, H200, 16);
  truth.flopEfficiency = 0.3;
  truth.bandwidthEfficiency = 0.55;
  truth.stepOverheadS = 0.006;
  const samples = [];
  for (const p of [0, 512, 4096, 16384]) {
    for (const d of [1, 32, 256]) {
      const shape = { prefillTokens: p, prefillAttnPairs: truth.prefillPairs(1000, p), decodeSeqs: d, decodeAttnTokens: d * 4096 };
      samples.push({ work: truth.work(shape), measuredS: truth.stepTime(shape) });
    }
  }
  const fit = new CostModel(KIMI_K2_6, H200, 16);
  const rms = fit.calibrate(samples, 60);
  assert.ok(rms < 1e-3, `rms ${rms}`);
  assert.ok(Math.abs(fit.flopEfficiency - 0.3) < 0.03, `flop eff ${fit.flopEfficiency}`);
  assert.ok(Math.abs(fit.bandwidthEfficiency - 0.55) < 0.05, `bw eff ${fit.bandwidthEfficiency}`);
});

test("CostModel with replicated KV (tensor-parallel MLA attention) reads the KV once per GPU", () => {
  const split = new CostModel(KIMI_K2_6, GB300, 8);
  const repl = new CostModel(KIMI_K2_6, GB300, 8, 8);
  const shape = { prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 64, decodeAttnTokens: 64 * 100_000 };
  const kv = KIMI_K2_6.kvBytesPerToken * shape.decodeAttnTokens;
  assert.ok(Math.abs(repl.work(shape).bytes - split.work(shape).bytes - 7 * kv) < 1e-6 * kv);
  assert.ok(repl.stepTime(shape) > 1.5 * split.stepTime(shape), "long-context decode becomes KV-bound");
});

test("CostModel.stepTime() adds mixedStepOverheadS only to steps carrying both prefill and decode", () => {
  const plain = new CostModel(KIMI_K2_6, GB300, 8);
  const slow = new CostModel(KIMI_K2_6, { ...GB300, mixedStepOverheadS: 0.02 }, 8);
  const mixed = { prefillTokens: 4096, prefillAttnPairs: plain.prefillPairs(0, 4096), decodeSeqs: 32, decodeAttnTokens: 32 * 4096 };
  const prefillOnly = { ...mixed, decodeSeqs: 0, decodeAttnTokens: 0 };
  const decodeOnly = { ...mixed, prefillTokens: 0, prefillAttnPairs: 0 };
  assert.ok(Math.abs(slow.stepTime(mixed) - plain.stepTime(mixed) - 0.02) < 1e-12);
  assert.equal(slow.stepTime(prefillOnly), plain.stepTime(prefillOnly));
  assert.equal(slow.stepTime(decodeOnly), plain.stepTime(decodeOnly));
});
