/**
 * Host overhead per token (scripts/bench-host-overhead.ts): the scheduler hands out each sequence's
 * block table as a frozen copy made again only when the table changed (scheduler-tables.ts), not a
 * copy per entry per step. What a consumer of a plan can see must not change: an entry's table is
 * the sequence's table as planned, later steps do not show through it, and writing into it cannot
 * reach the scheduler's state or a later plan.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import type { Scheduler } from "../../src/engine/scheduler.ts";
import type { StepPlan } from "../../src/engine/scheduler-types.ts";
import { fakeSample, make, range } from "./scheduler-fixtures.ts";

/** Every entry of `plan` carries its sequence's table as it is now. */
function tablesMatch(sched: Scheduler, plan: StepPlan, at: string): void {
  for (const e of plan.entries) assert.deepEqual([...e.blockTable], sched.get(e.seqId)!.blockTable, `${at}: sequence ${e.seqId}'s entry`);
}

test("a plan's block table is the sequence's table as planned: later growth does not show through it, and it is reused while unchanged", () => {
  const { sched } = make(32, 4);
  sched.submit(1, range(6));
  const seen: { plan: StepPlan; table: number[] }[] = [];
  for (let i = 0; i < 12; i++) {
    const plan = sched.schedule();
    tablesMatch(sched, plan, `step ${i}`);
    seen.push({ plan, table: [...plan.entries[0].blockTable] });
    sched.commit(plan, fakeSample(plan));
  }
  // 6 prompt tokens and 12 generated ones grew the table from 2 blocks to 5 meanwhile.
  assert.equal(sched.get(1)!.blockTable.length, 5);
  for (const [i, s] of seen.entries()) assert.deepEqual([...s.plan.entries[0].blockTable], s.table, `step ${i}'s entry still holds the table it was planned with`);
  // Between block boundaries the table stays the same: those steps hand out the same copy.
  const same = seen.filter((s, i) => i > 0 && s.table.join() === seen[i - 1].table.join()).length;
  const reused = seen.filter((s, i) => i > 0 && s.plan.entries[0].blockTable === seen[i - 1].plan.entries[0].blockTable).length;
  assert.ok(same > 5, `the table stayed the same over several steps (${same})`);
  assert.equal(reused, same, "an unchanged table is handed out again, not copied");
});

test("writing into a plan's block table reaches neither the sequence nor a later plan", () => {
  const { sched } = make(32, 4);
  sched.submit(1, range(5));
  let plan = sched.schedule();
  sched.commit(plan, fakeSample(plan));
  const before = [...sched.get(1)!.blockTable];
  plan = sched.schedule();
  const table = plan.entries[0].blockTable as number[];
  // A frozen table refuses the write; a private copy takes it. Either way nobody else may see it.
  for (const write of [() => table.push(31), () => (table[0] = 30), () => table.splice(0, 1), () => table.reverse()]) {
    try {
      write();
    } catch (e) {
      assert.ok(e instanceof TypeError, `a refused write is a TypeError: ${e}`);
    }
  }
  assert.deepEqual(sched.get(1)!.blockTable, before, "the sequence's table is untouched");
  sched.commit(plan, fakeSample(plan));
  const next = sched.schedule();
  tablesMatch(sched, next, "the next step");
  assert.deepEqual([...next.entries[0].blockTable], before, "the next plan has the real table");
});

test("a table that loses a rejected draft's blocks and grows back to its old length holding other blocks is copied again", () => {
  // Sequence 2 drafts 4 tokens every step and none is taken: its table grows by the draft's blocks
  // in each plan and gives them back at each commit. Sequence 1, planned first, takes a block every
  // other step, the last one 2 gave back, in the steps where 2's table comes back to the same length:
  // it then holds another block there ([2,3,4,5,6], then [2,3,4,6,7]).
  const { sched } = make(40, 2);
  sched.submit(1, range(3));
  sched.submit(2, range(4, 20));
  let plan = sched.schedule();
  sched.commit(plan, fakeSample(plan));
  let regrown = 0;
  let last: readonly number[] = [];
  for (let step = 0; step < 12; step++) {
    sched.propose(2, [7, 7, 7, 7]);
    plan = sched.schedule();
    tablesMatch(sched, plan, `step ${step}`);
    const table = plan.entries.find((e) => e.seqId === 2)!.blockTable;
    if (table.length === last.length && table.join() !== last.join()) regrown++;
    last = [...table];
    sched.commit(plan, fakeSample(plan), new Map([[2, []]]));
  }
  assert.ok(regrown > 0, "the case arose");
});
