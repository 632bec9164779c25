import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { OnlinePlanner, SessionAdmission, type WorkerSnapshot } from "../../planner/index.ts";
import { snap } from "./snapshots.ts";

/** 20 serving workers, the first `waiting` of them with turns waiting for KV memory. */
function fleet(waiting: number): WorkerSnapshot[] {
  return snap(0, Array(20).fill("mixed"), { uncachedPerS: 100_000, outputPerS: 5_000, backlog: 0, seqs: 400 }).workers
    .map((w, i) => ({ ...w, waitingForMemory: i < waiting ? 3 : 0 }));
}

test("SessionAdmission holds new sessions after two ticks with a quarter of the workers waiting for KV memory", () => {
  const a = new SessionAdmission();
  assert.equal(a.update(fleet(4)), null, "20% waiting: admit");
  assert.equal(a.update(fleet(4)), null);
  assert.equal(a.update(fleet(5)), null, "25% waiting, first tick: not yet");
  assert.equal(a.update(fleet(5)), true, "second tick: hold");
  assert.equal(a.holdingNewSessions, true);
  assert.equal(a.update(fleet(5)), null, "no change while it holds");
});

test("SessionAdmission admits again only once memory waits fall to a twentieth of the workers", () => {
  const a = new SessionAdmission();
  a.update(fleet(10));
  assert.equal(a.update(fleet(10)), true);
  // Between the two fractions: keeps holding (hysteresis, no flapping).
  for (let i = 0; i < 5; i++) assert.equal(a.update(fleet(3)), null);
  assert.equal(a.update(fleet(1)), null, "5% waiting, first tick");
  assert.equal(a.update(fleet(4)), null, "back above: the streak restarts");
  assert.equal(a.update(fleet(1)), null);
  assert.equal(a.update(fleet(0)), false, "two ticks at or below 5%: admit");
  assert.equal(a.holdingNewSessions, false);
});

test("SessionAdmission rejects an admit fraction that is not below the hold fraction", () => {
  assert.throws(() => new SessionAdmission({ holdFraction: 0.1, admitFraction: 0.1 }), /admitFraction below holdFraction; got 0.1 and 0.1/);
});

test("OnlinePlanner with sessionAdmission sends admission actions, and never without it", () => {
  const kinds = (p: OnlinePlanner) => {
    const out: string[] = [];
    for (let t = 1; t <= 4; t++) {
      const s = snap(t, Array(20).fill("mixed"), { uncachedPerS: 100_000, outputPerS: 5_000, backlog: 0, seqs: 400 });
      s.workers = s.workers.map((w, i) => ({ ...w, waitingForMemory: t <= 2 && i < 10 ? 2 : 0 }));
      for (const a of p.tick(s)) if (a.kind === "admission") out.push(`${t}:${a.holdNewSessions ? "hold" : "admit"}`);
    }
    return out;
  };
  assert.deepEqual(kinds(new OnlinePlanner({ sessionAdmission: true })), ["2:hold", "4:admit"]);
  const first = new OnlinePlanner({ sessionAdmission: { maxHoldS: 30 } });
  kinds(first);
  const s = snap(5, Array(20).fill("mixed"), { uncachedPerS: 100_000, outputPerS: 5_000, backlog: 0, seqs: 400 });
  s.workers = s.workers.map((w) => ({ ...w, waitingForMemory: 1 }));
  first.tick(s);
  const hold = first.tick({ ...s, now: 6 }).find((a) => a.kind === "admission");
  assert.deepEqual(hold, { kind: "admission", holdNewSessions: true, maxHoldS: 30 });
  assert.deepEqual(kinds(new OnlinePlanner()), []);
});
