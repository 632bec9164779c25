import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { type CompletedRequest, GoodputCurve, ItlAdmission, withinAt } from "../../planner/index.ts";

const TARGET = 0.05;

/** A request that decoded `osl` tokens at `itlS` each. */
const done = (itlS: number, osl: number): CompletedRequest => ({ isl: 100, osl, ttftS: 0.1, itlS });

/**
 * Feeds `curve` (or an ItlAdmission) 900 ticks whose load cycles 500..5500 sequences; each tick 40
 * short requests finish, within the target below about 3000 sequences and past it above (with a
 * deterministic spread).
 */
function feed(observe: (now: number, seqs: number, d: CompletedRequest[]) => void): void {
  for (let t = 0; t < 900; t++) {
    const seqs = 500 + ((t * 37) % 5001);
    const d: CompletedRequest[] = [];
    for (let k = 0; k < 40; k++) {
      const jitter = 0.8 + 0.4 * (((t * 40 + k) * 0.618034) % 1);
      d.push(done((TARGET * jitter * seqs) / 3000, 2));
    }
    observe(t, seqs, d);
  }
}

test("GoodputCurve.observe() places a request at the mean load it decoded under", () => {
  const c = new GoodputCurve();
  for (let t = 0; t <= 100; t++) c.tick(t, t < 50 ? 1000 : 3000);
  // 2501 tokens at 40 ms: decoded over the last 100 s, half at 1000 sequences and half at 3000.
  c.observe([done(0.04, 2501)], TARGET);
  const placed = c.maxLoadSeen(1);
  assert.ok(placed >= 2000 && placed <= 2000 * 2 ** (1 / 16) + 1, `placed at ${placed}, expected the bin of 2000`);
  // 1001 tokens at 40 ms decoded over the last 40 s, all at 3000.
  c.observe([done(0.04, 1001)], TARGET);
  const top = c.maxLoadSeen(1);
  assert.ok(top >= 3000 && top <= 3000 * 2 ** (1 / 16) + 1, `placed at ${top}, expected the bin of 3000`);
  assert.equal(c.points, 2);
});

test("GoodputCurve.fit() finds the fraction within the target falling with load", () => {
  const c = new GoodputCurve();
  assert.equal(c.fit(), null, "no fit without requests");
  feed((now, seqs, d) => { c.tick(now, seqs); c.observe(d, TARGET); });
  const f = c.fit();
  assert.ok(f !== null);
  assert.ok(f.b < 0, `slope ${f.b} should be negative`);
  assert.ok(withinAt(f, 1500) > 0.9, `P(within | 1500) = ${withinAt(f, 1500)}`);
  assert.ok(withinAt(f, 4500) < 0.1, `P(within | 4500) = ${withinAt(f, 4500)}`);
});

test("ItlAdmission with the fitted aim fills the pool toward the load where good requests/s peak, and falls back to the measured aim past it", () => {
  const fitted = new ItlAdmission({ aim: "fitted" });
  feed((now, seqs, d) => { fitted.observe(d); fitted.observeLoad(now, seqs, d, TARGET); });
  // A step model that sees almost no cost in load (the measured aim alone would let tens of
  // thousands in): the curve decides. Good requests/s, load × P(within), peak where the spread's
  // slowest requests reach the target: 3000 / 1.2 = 2500 sequences.
  const itlWith = (seqs: number) => (extra: number) => 0.005 + 0.000001 * (seqs + extra);
  const room = fitted.budget(itlWith(1500), null, TARGET, 32, 1500);
  assert.ok(1500 + room >= 2000 && 1500 + room <= 3200, `fills from 1500 to ${1500 + room}, expected near 2500`);
  assert.equal(fitted.budget(itlWith(2900), null, TARGET, 32, 2900), 0, "no room past the peak");
  // At 5000 the curve predicts most requests miss: the measured aim decides, as it would alone.
  const measured = new ItlAdmission({ aim: "measured" });
  feed((_now, _seqs, d) => measured.observe(d));
  const lowItl = (extra: number) => 0.001 + 0.000001 * extra;
  assert.equal(fitted.budget(lowItl, null, TARGET, 32, 5000), measured.budget(lowItl, null, TARGET, 32, 5000));
  assert.ok(measured.budget(lowItl, null, TARGET, 32, 5000) > 0);
});

test("ItlAdmission with the fitted aim leaves the door to the measured aim until the curve has measured a decline", () => {
  // Every request within the target at every load seen: a flat curve, which says nothing about loads that hurt.
  const flat = (observe: (now: number, seqs: number, d: CompletedRequest[]) => void) => {
    for (let t = 0; t < 600; t++) {
      const seqs = 500 + ((t * 37) % 2001);
      observe(t, seqs, Array.from({ length: 40 }, (_, k) => done(TARGET * (0.3 + 0.01 * (k % 20)), 2)));
    }
  };
  const fitted = new ItlAdmission({ aim: "fitted" });
  flat((now, seqs, d) => { fitted.observe(d); fitted.observeLoad(now, seqs, d, TARGET); });
  const measured = new ItlAdmission({ aim: "measured" });
  flat((_now, _seqs, d) => measured.observe(d));
  const itl = (extra: number) => 0.01 + 0.000002 * (2000 + extra);
  const want = measured.budget(itl, null, TARGET, 32, 2000);
  assert.ok(Number.isFinite(want) && want > 0, `the measured aim's budget ${want}`);
  assert.equal(fitted.budget(itl, null, TARGET, 32, 2000), want);
});
