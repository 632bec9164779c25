import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { kvAwareCost, type LinkModel, type RouteCandidate, routeKvAware, routeSession } from "../../planner/index.ts";

function cand(id: string, o: Partial<RouteCandidate> = {}): RouteCandidate {
  return {
    id, role: "decode", overlapDevice: 0, overlapHost: 0, queuedPrefillTokens: 0, activeBlocks: 0, decodeBatch: 0,
    prefillRate: 100_000, decodeStepS: 0.02, rack: 0, ...o,
  };
}

const links: LinkModel = { bandwidth: (a, b) => (a === b ? 1e12 : 1e11), latency: () => 1e-5, hostBandwidth: 4e11 };

test("kvAwareCost() is overlap_weight × uncached blocks (with queued prefill) plus active decode blocks", () => {
  const c = cand("a", { overlapDevice: 6, queuedPrefillTokens: 32, activeBlocks: 5 });
  // 10 request blocks, 6 cached → 4 uncached, + 32/16 = 2 queued → 6 prefill blocks; + 5 active.
  assert.equal(kvAwareCost(c, 10, 16, 1), 11);
  assert.equal(kvAwareCost(c, 10, 16, 2), 17);
  const pick = routeKvAware([c, cand("b", { activeBlocks: 3 })], 10, 16);
  assert.equal(pick?.id, "a", "a costs 11, b costs 10 + 3 = 13");
});

test("routeKvAware() picks the lowest cost and ties to the first candidate", () => {
  const a = cand("a", { overlapDevice: 8 });
  const b = cand("b", { overlapDevice: 8 });
  assert.equal(routeKvAware([a, b], 10, 16)?.id, "a");
  assert.equal(routeKvAware([cand("x"), cand("y", { overlapDevice: 9 })], 10, 16)?.id, "y");
});

test("routeSession() keeps a session on the worker holding its KV unless that worker is overloaded", () => {
  const req = { promptTokens: 40_000, blockTokens: 2048, bytesPerBlock: 70e6, lastWorker: "holder" };
  const o = { localPrefillThreshold: 4096, itlTargetS: 0.05 };
  const holder = cand("holder", { overlapDevice: 19, overlapHost: 19 });
  const other = cand("other");
  assert.equal(routeSession(req, [other, holder], [cand("p", { role: "prefill" })], links, o)?.decodeWorker, "holder");
  // The holder is deeply queued: recomputing elsewhere is faster.
  const busy = cand("holder", { overlapDevice: 19, overlapHost: 19, queuedPrefillTokens: 2_000_000 });
  assert.equal(routeSession(req, [other, busy], [cand("p", { role: "prefill" })], links, o)?.decodeWorker, "other");
});

test("routeSession() sends a long uncached suffix to a prefill worker and moves the prefix when that is cheaper", () => {
  const req = { promptTokens: 60_000, blockTokens: 2048, bytesPerBlock: 70e6 };
  const o = { localPrefillThreshold: 1024, itlTargetS: 0.05 };
  const d = cand("d", { overlapDevice: 10, overlapHost: 10, prefillRate: 20_000 });
  const p = cand("p", { role: "prefill", prefillRate: 200_000 });
  const r = routeSession(req, [d], [p], links, o)!;
  assert.equal(r.prefillWorker, "p");
  assert.equal(r.prefixTransferBlocks, 10, "10 blocks over 1 TB/s beat recomputing 20k tokens");
  const slow: LinkModel = { ...links, bandwidth: () => 1e8 };
  assert.equal(routeSession(req, [d], [p], slow, o)!.prefixTransferBlocks, 0, "over a slow link it recomputes");
});
