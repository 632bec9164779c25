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
  // Prefilling 40k tokens locally would stall the 64 sequences decoding on d.
  const d = cand("d", { overlapDevice: 10, overlapHost: 10, prefillRate: 20_000, decodeBatch: 64 });
  const p = cand("p", { role: "prefill", prefillRate: 200_000 });
  const r = routeSession(req, [d], [p], links, o)!;
  assert.equal(r.prefillWorker, "p");
  assert.equal(r.prefixTransferBlocks, 10, "10 blocks over 1 TB/s beat recomputing 20k tokens");
  const slow: LinkModel = { ...links, bandwidth: () => 1e8 };
  assert.equal(routeSession(req, [d], [p], slow, o)!.prefixTransferBlocks, 0, "over a slow link it recomputes");
});

test("routeSession() prices every worker at the fleet prefill rate, not its own noisy estimate", () => {
  const req = { promptTokens: 2_000, blockTokens: 512, bytesPerBlock: 18e6 };
  const o = { localPrefillThreshold: 4096, itlTargetS: 0.05 };
  // "idle" measured a low rate on short prompts (step overhead); "busy" is decoding 6 sequences.
  const idle = cand("idle", { prefillRate: 50_000 });
  const busy = cand("busy", { prefillRate: 250_000, decodeBatch: 6 });
  assert.equal(routeSession(req, [busy, idle], [], links, o)?.decodeWorker, "idle");
});

test("routeSession() keeps a long prefill off a worker whose decode batch it would stall", () => {
  const req = { promptTokens: 30_000, blockTokens: 2048, bytesPerBlock: 70e6 };
  const o = { localPrefillThreshold: 1_000_000, itlTargetS: 0.05 };
  const crowded = cand("crowded", { decodeBatch: 200 });
  const light = cand("light", { decodeBatch: 20 });
  assert.equal(routeSession(req, [crowded, light], [], links, o)?.decodeWorker, "light");
  // With the stall weighed at 0 only the 1 ms-per-sequence spread separates them; still light, but by far less.
  const r = routeSession(req, [crowded, light], [], links, { ...o, interferenceWeight: 0 })!;
  assert.equal(r.decodeWorker, "light");
});

test("routeSession() with memoryWaitS steers a turn away from a worker where others already wait for KV memory", () => {
  const req = { promptTokens: 20_000, blockTokens: 2048, bytesPerBlock: 70e6, lastWorker: "holder" };
  const o = { localPrefillThreshold: 1_000_000, itlTargetS: 0.05, memoryWaitS: 1 };
  const holder = cand("holder", { overlapDevice: 8, overlapHost: 8 });
  const other = cand("other");
  assert.equal(routeSession(req, [other, holder], [], links, o)?.decodeWorker, "holder", "its KV is there");
  const full = cand("holder", { overlapDevice: 8, overlapHost: 8, memoryQueue: 3 });
  assert.equal(routeSession(req, [other, full], [], links, o)?.decodeWorker, "other", "three turns already wait for memory there");
  assert.equal(routeSession(req, [other, full], [], links, { ...o, memoryWaitS: undefined })?.decodeWorker, "holder", "off by default");
});

test("routeSession() with peerTransfer pulls the prefix from a busy holder instead of recomputing it", () => {
  const req = { promptTokens: 60_000, blockTokens: 2048, bytesPerBlock: 70e6, lastWorker: "holder" };
  const o = { localPrefillThreshold: 1_000_000, itlTargetS: 0.05, peerTransfer: true };
  // The holder has 28 of the prompt's 29 full blocks but 1 M tokens queued (10 s); "idle" has nothing queued.
  const holder = cand("holder", { role: "mixed", overlapDevice: 28, overlapHost: 28, queuedPrefillTokens: 1_000_000 });
  const idle = cand("idle", { role: "mixed" });
  const r = routeSession(req, [holder, idle], [], links, o)!;
  assert.equal(r.decodeWorker, "idle");
  assert.equal(r.prefixSource, "holder");
  assert.equal(r.prefixTransferBlocks, 28);
  // 28 × 70 MB over 1 TB/s ≈ 2 ms, then the 2.7k uncached tokens: far below recomputing 57k tokens (0.57 s).
  assert.ok(r.predictedTtftS < 0.1, `predicted TTFT ${r.predictedTtftS}`);
  // Without it the idle worker must recompute everything, and a less busy holder keeps the turn.
  const calmer = { ...holder, queuedPrefillTokens: 20_000 };
  assert.equal(routeSession(req, [calmer, idle], [], links, { ...o, peerTransfer: false })?.prefixSource, undefined);
  assert.equal(routeSession(req, [calmer, idle], [], links, { ...o, peerTransfer: false })?.decodeWorker, "holder");
  // Over a link too slow to beat recomputing, nothing is pulled.
  const slow: LinkModel = { ...links, bandwidth: () => 1e8 };
  assert.equal(routeSession(req, [holder, idle], [], slow, o)!.prefixTransferBlocks, 0);
});

test("routeSession() with peerMoveS keeps the turn on its holder unless moving wins by that much", () => {
  const req = { promptTokens: 60_000, blockTokens: 2048, bytesPerBlock: 70e6, lastWorker: "holder" };
  const o = { localPrefillThreshold: 1_000_000, itlTargetS: 0.05, peerTransfer: true };
  // 20k tokens queued on the holder: 0.2 s more than the idle worker, which can pull the prefix in ~2 ms.
  const holder = cand("holder", { role: "mixed", overlapDevice: 28, overlapHost: 28, queuedPrefillTokens: 20_000 });
  const idle = cand("idle", { role: "mixed" });
  assert.equal(routeSession(req, [holder, idle], [], links, o)?.decodeWorker, "idle");
  assert.equal(routeSession(req, [holder, idle], [], links, { ...o, peerMoveS: 0.5 })?.decodeWorker, "holder");
  assert.equal(routeSession(req, [holder, idle], [], links, { ...o, peerMoveS: 0.1 })?.decodeWorker, "idle");
});

test("routeSession() with memoryFullS moves a turn off a holder that has no room for it", () => {
  const req = { promptTokens: 60_000, blockTokens: 2048, bytesPerBlock: 70e6, lastWorker: "holder" };
  const o = { localPrefillThreshold: 1_000_000, itlTargetS: 0.05, peerTransfer: true, peerMoveS: 0.5, memoryFullS: 1 };
  const holder = cand("holder", { role: "mixed", overlapDevice: 20, overlapHost: 20, freeBlocks: 100 });
  const idle = cand("idle", { role: "mixed", freeBlocks: 100 });
  assert.equal(routeSession(req, [holder, idle], [], links, o)?.decodeWorker, "holder", "room for its 10 uncached blocks");
  const full = { ...holder, freeBlocks: 5 };
  const r = routeSession(req, [full, idle], [], links, o)!;
  assert.equal(r.decodeWorker, "idle", "the holder lacks 10 free blocks: it would wait for memory");
  assert.equal(r.prefixSource, "holder");
  const queued = { ...holder, memoryQueue: 1 };
  assert.equal(routeSession(req, [queued, idle], [], links, o)?.decodeWorker, "idle", "a turn already waits for memory there");
  // The idle worker lacks room for the whole 30-block prompt too: both would wait, the holder keeps it.
  assert.equal(routeSession(req, [full, { ...idle, freeBlocks: 20 }], [], links, o)?.decodeWorker, "holder");
});

test("routeSession() with peerHostBlocks pulls blocks the holder keeps in host memory, charging their read", () => {
  const req = { promptTokens: 60_000, blockTokens: 2048, bytesPerBlock: 70e6, lastWorker: "holder" };
  const o = { localPrefillThreshold: 1_000_000, itlTargetS: 0.05, peerTransfer: true, peerHostBlocks: true };
  // The holder keeps 8 of the prompt's blocks on device and 20 more in host memory, with 10 s of prefill queued.
  const holder = cand("holder", { role: "mixed", overlapDevice: 8, overlapHost: 28, queuedPrefillTokens: 1_000_000 });
  const idle = cand("idle", { role: "mixed" });
  const r = routeSession(req, [holder, idle], [], links, o)!;
  assert.equal(r.decodeWorker, "idle");
  assert.equal(r.prefixSource, "holder");
  assert.equal(r.prefixTransferBlocks, 28);
  assert.equal(r.prefixSourceHostBlocks, 20);
  // 20 × 70 MB read at 400 GB/s (3.5 ms), 28 blocks over the link (1.96 ms + 10 µs), then the 2,656 uncached tokens.
  assert.ok(Math.abs(r.predictedTtftS - (0.0035 + 0.00196 + 1e-5 + 2_656 / 100_000)) < 1e-9, `predicted TTFT ${r.predictedTtftS}`);
  // Without it only the 8 device blocks move and the other 43.6k tokens are recomputed.
  const devOnly = routeSession(req, [holder, idle], [], links, { ...o, peerHostBlocks: false })!;
  assert.equal(devOnly.prefixTransferBlocks, 8);
  assert.equal(devOnly.prefixSourceHostBlocks, undefined);
  assert.ok(devOnly.predictedTtftS > 0.43, `predicted TTFT ${devOnly.predictedTtftS}`);
  // A host link too slow to beat recomputing: nothing from host memory moves.
  const slowHost: LinkModel = { ...links, hostBandwidth: 1e8 };
  assert.equal(routeSession(req, [holder, idle], [], slowHost, o)!.prefixTransferBlocks, 0);
});

test("routeSession() pulls a session's prefix from a prefill-role worker holding it", () => {
  // The session's worker flipped to prefill: its KV is there, and no decoder holds any of it.
  const req = { promptTokens: 40_000, blockTokens: 2048, bytesPerBlock: 70e6, lastWorker: "flipped" };
  const o = { localPrefillThreshold: 4096, itlTargetS: 0.05, peerTransfer: true };
  const flipped = cand("flipped", { role: "prefill", overlapDevice: 19, overlapHost: 19 });
  const r = routeSession(req, [cand("d", { role: "mixed" })], [flipped], links, o)!;
  assert.equal(r.decodeWorker, "d");
  assert.equal(r.prefixSource, "flipped", "19 blocks over the link beat recomputing 38k tokens");
  assert.equal(r.prefixTransferBlocks, 19);
  // Recomputing would take 0.4 s at 100k tokens/s; the move takes ~13 ms and the last 1.1k tokens.
  assert.ok(r.predictedTtftS < 0.05, `predicted ${r.predictedTtftS}`);
});

test("routeSession() hands a turn to the prefill worker holding its context, however long its queue", () => {
  const req = { promptTokens: 40_000, blockTokens: 2048, bytesPerBlock: 70e6 };
  const o = { localPrefillThreshold: 1024, itlTargetS: 0.05, prefillShortlist: 2 };
  const d = cand("d", { decodeBatch: 64 });
  // Two idle prefill workers and the holder, whose queue puts it past a shortlist of two.
  const idle = [cand("p1", { role: "prefill" }), cand("p2", { role: "prefill" })];
  const holder = cand("holder", { role: "prefill", overlapDevice: 19, overlapHost: 19, queuedPrefillTokens: 5_000 });
  const r = routeSession(req, [d], [...idle, holder], links, o)!;
  assert.equal(r.prefillWorker, "holder", "0.05 s of queue and 1.1k new tokens beat recomputing 40k");
  // Priced as queue + the new tokens + sending the 20 blocks d lacks, not as recomputing the context.
  const expected = 5_000 / 100_000 + 1_088 / 100_000 + 1e-5 + (20 * 70e6) / 1e12;
  assert.ok(Math.abs(r.predictedTtftS - expected) < 1e-9, `predicted ${r.predictedTtftS}, expected ${expected}`);
});

test("routeSession() charges peerMoveS for a pull except to a turn opening a session while the holder has prefill queued", () => {
  // "busy" holds a shared 3-block system prompt with a queue; "idle" holds nothing.
  const busy = cand("busy", { role: "mixed", overlapDevice: 3, overlapHost: 3, queuedPrefillTokens: 4_000 });
  const idle = cand("idle", { role: "mixed" });
  const o = { localPrefillThreshold: 4096, itlTargetS: 0.05, peerTransfer: true, peerMoveS: 0.5 };
  const turn = { promptTokens: 3_000, blockTokens: 1024, bytesPerBlock: 1e6 };
  const r = routeSession({ ...turn, newSession: true }, [busy, idle], [], links, o)!;
  assert.equal(r.decodeWorker, "idle", "a new session pulls the shared blocks to the idle worker");
  assert.equal(r.prefixSource, "busy");
  // A turn of a session last served by "busy" stays: moving gains 40 ms, less than the 0.5 s charge;
  // so does a turn without a key (it may be a returning one).
  assert.equal(routeSession({ ...turn, lastWorker: "busy" }, [busy, idle], [], links, o)!.decodeWorker, "busy");
  assert.equal(routeSession(turn, [busy, idle], [], links, o)!.decodeWorker, "busy");
  // With the holder idle, a new session starts there too, even where another worker decodes fewer
  // sequences (pulling there would gain only the 1 ms per sequence decoding).
  const quiet = cand("quiet", { role: "mixed", overlapDevice: 3, overlapHost: 3, decodeBatch: 8 });
  const nsReq = { ...turn, newSession: true };
  assert.equal(routeSession(nsReq, [quiet, idle], [], links, o)!.decodeWorker, "quiet");
  assert.equal(routeSession(nsReq, [quiet, idle], [], links, { ...o, peerMoveS: 0 })!.decodeWorker, "idle", "uncharged, the pull would win");
});

test("routeSession() spreads turns opening sessions by the live sessions homed on each worker (sessionSpreadS)", () => {
  // Both idle between turns; "home" holds the shared 3-block system prompt and four live sessions.
  const home = cand("home", { role: "mixed", overlapDevice: 3, overlapHost: 3, liveSessions: 4 });
  const empty = cand("empty", { role: "mixed" });
  const o = { localPrefillThreshold: 4096, itlTargetS: 0.05, peerTransfer: true, peerMoveS: 0.5 };
  const opening = { promptTokens: 3_000, blockTokens: 1024, bytesPerBlock: 1e6, newSession: true };
  assert.equal(routeSession(opening, [home, empty], [], links, o)!.decodeWorker, "home", "off by default: the holder wins the tie");
  const spread = { ...o, sessionSpreadS: 0.25 };
  const r = routeSession(opening, [home, empty], [], links, spread)!;
  assert.equal(r.decodeWorker, "empty", "4 × 0.25 s outweighs the 0.5 s pull charge");
  assert.equal(r.prefixSource, "home", "the shared prompt is still pulled, not recomputed");
  // Two live sessions (0.5 s) do not outweigh the charge plus the pull itself.
  assert.equal(routeSession(opening, [{ ...home, liveSessions: 2 }, empty], [], links, spread)!.decodeWorker, "home");
  // A returning turn is not spread: its context is where it was served.
  const back = { promptTokens: 3_000, blockTokens: 1024, bytesPerBlock: 1e6, lastWorker: "home" };
  assert.equal(routeSession(back, [home, empty], [], links, spread)!.decodeWorker, "home");
});

test("routeSession() with waiveOpeningPulls charges no pull of a turn opening a session, even from an idle holder", () => {
  const holder = cand("holder", { role: "mixed", overlapDevice: 3, overlapHost: 3, liveSessions: 1 });
  const empty = cand("empty", { role: "mixed" });
  const o = { localPrefillThreshold: 4096, itlTargetS: 0.05, peerTransfer: true, peerMoveS: 0.5, sessionSpreadS: 0.05 };
  const opening = { promptTokens: 3_000, blockTokens: 1024, bytesPerBlock: 1e6, newSession: true };
  assert.equal(routeSession(opening, [holder, empty], [], links, o)!.decodeWorker, "holder", "charged, the idle holder keeps it");
  const r = routeSession(opening, [holder, empty], [], links, { ...o, waiveOpeningPulls: true })!;
  assert.deepEqual([r.decodeWorker, r.prefixSource], ["empty", "holder"], "waived, one live session (0.05 s) tips it to the empty worker");
  // A returning turn's pull is charged all the same.
  const back = { promptTokens: 3_000, blockTokens: 1024, bytesPerBlock: 1e6, lastWorker: "holder" };
  assert.equal(routeSession(back, [{ ...holder, queuedPrefillTokens: 20_000 }, empty], [], links, { ...o, waiveOpeningPulls: true })!.decodeWorker, "holder");
});

test("routeSession() prices a pulled prefix's recurrent state with its blocks: a state too large to move keeps the work where it is", () => {
  const req = { promptTokens: 60_000, blockTokens: 2048, bytesPerBlock: 70e6, lastWorker: "holder" };
  const o = { localPrefillThreshold: 1_000_000, itlTargetS: 0.05, peerTransfer: true };
  const holder = cand("holder", { role: "mixed", overlapDevice: 28, overlapHost: 28, queuedPrefillTokens: 1_000_000 });
  const idle = cand("idle", { role: "mixed" });
  // 60 MiB of state (a 9B hybrid's) adds ~60 µs over 1 TB/s: still pulled.
  const small = routeSession({ ...req, stateBytes: 60 * 2 ** 20 }, [holder, idle], [], links, o)!;
  assert.deepEqual([small.decodeWorker, small.prefixSource], ["idle", "holder"]);
  assert.ok(small.predictedTtftS > routeSession(req, [holder, idle], [], links, o)!.predictedTtftS, "the state's bytes are in the pull's time");
  // A state that takes longer to move than the 57k tokens take to compute (0.57 s) is not pulled.
  const huge = routeSession({ ...req, stateBytes: 1e12 }, [holder, idle], [], links, o)!;
  assert.equal(huge.prefixTransferBlocks, 0);
  assert.equal(huge.prefixSource, undefined);
});
