/**
 * Invariants of the scheduler fuzz test (scheduler-fuzz-hunt3.test.ts), checked against a
 * {@link FuzzWorld} after every operation: reference counts, the pool's free count, swap space,
 * what the blocks of every running sequence hold, each step plan's shape, and the queue gauges.
 */
import type { StepPlan } from "../../src/engine/scheduler-types.ts";
import type { FuzzWorld } from "./scheduler-fuzz-world.ts";

/**
 * Every block's reference count is the number of running sequences' tables holding it plus its
 * hand-off holds; waiting sequences hold none; the unreferenced blocks are exactly the free count;
 * a block held twice is in the prefix cache; the scheduler's queues are the live requests.
 */
export function checkPool(w: FuzzWorld): void {
  const { pool, sched, shape } = w;
  const bs = shape.blockSize;
  // First: counting used blocks lets go of expired hand-off holds (poolBlockManager's numUsed prunes).
  const st = sched.stats();
  const refs = new Array<number>(shape.numBlocks).fill(0);
  let running = 0, waiting = 0, swapped = 0;
  for (const id of w.live) {
    const seq = w.reqs.get(id)!.seq;
    if (sched.get(id) !== seq) w.fail(`live sequence ${id} is not known to the scheduler`);
    if (seq.status === "finished") w.fail(`live sequence ${id} is finished (${seq.finishReason})`);
    if (seq.status === "waiting") {
      waiting++;
      if (seq.blockTable.length > 0) w.fail(`waiting sequence ${id} holds blocks [${seq.blockTable}]`);
      if (seq.numSwapped > 0) swapped += Math.ceil(seq.numSwapped / bs);
      if ((seq.numSwapped > 0) !== w.host.has(id)) w.fail(`sequence ${id} has ${seq.numSwapped} swapped tokens but host copy ${w.host.has(id)}`);
      continue;
    }
    running++;
    if (seq.numSwapped > 0) w.fail(`running sequence ${id} still counts ${seq.numSwapped} swapped tokens`);
    if (new Set(seq.blockTable).size !== seq.blockTable.length) w.fail(`sequence ${id} holds a block twice: [${seq.blockTable}]`);
    if (seq.blockTable.length * bs < seq.numComputed) w.fail(`sequence ${id} computed ${seq.numComputed} tokens in ${seq.blockTable.length} blocks`);
    for (const b of seq.blockTable) refs[b]++;
  }
  for (const [b, n] of w.tailHeld) refs[b] += n;
  let zero = 0;
  for (let b = 0; b < shape.numBlocks; b++) {
    if (pool.refCount(b) !== refs[b]) w.fail(`block ${b} has reference count ${pool.refCount(b)}, ${refs[b]} holders`);
    if (refs[b] === 0) zero++;
    if (refs[b] > 1 && pool.hashOf(b) === null) w.fail(`block ${b} is shared by ${refs[b]} holders but not in the prefix cache`);
    if ((w.tailHeld.get(b) ?? 0) > 1) w.fail(`block ${b} is held twice for hand-offs`);
  }
  if (zero !== pool.numFreeBlocks()) w.fail(`${zero} blocks unreferenced but the pool counts ${pool.numFreeBlocks()} free`);
  if (st.waiting !== waiting || st.running !== running) w.fail(`scheduler counts ${st.waiting} waiting and ${st.running} running, live are ${waiting} and ${running}`);
  if (sched.waitingSequences.length !== waiting || sched.waitingSequences.some((s) => !w.live.has(s.id) || s.status !== "waiting")) {
    w.fail(`waiting queue [${sched.waitingSequences.map((s) => s.id)}] is not the live waiting sequences`);
  }
  if (st.kvUsedBlocks !== shape.numBlocks - zero) w.fail(`stats say ${st.kvUsedBlocks} blocks used, ${shape.numBlocks - zero} are referenced`);
  if (st.swapUsedBlocks !== swapped || st.swapUsedBlocks > st.swapTotalBlocks) w.fail(`swap space counts ${st.swapUsedBlocks} of ${st.swapTotalBlocks} blocks, waiting sequences hold ${swapped}`);
}

/**
 * Every running sequence's computed positions hold its tokens, and (between steps, `between`) its
 * table has no block past its tokens.
 */
export function checkContent(w: FuzzWorld, between: boolean): void {
  for (const id of w.live) {
    const seq = w.reqs.get(id)!.seq;
    if (seq.status !== "running") continue;
    for (let p = 0; p < seq.numComputed; p++) {
      const got = w.held(seq.blockTable, p);
      if (got !== seq.tokens[p]) w.fail(`sequence ${id} position ${p} holds ${got}, its token is ${seq.tokens[p]} (table [${seq.blockTable}])`);
    }
    if (between && seq.blockTable.length > Math.ceil(seq.tokens.length / w.shape.blockSize)) {
      w.fail(`sequence ${id} of ${seq.tokens.length} tokens holds ${seq.blockTable.length} blocks`);
    }
  }
}

/** A plan's entries match their sequences, fit the budget and the running limit; its victims wait. */
export function checkPlan(w: FuzzWorld, plan: StepPlan): void {
  const cfg = w.sched.config;
  const bs = w.shape.blockSize;
  const seen = new Set<number>();
  let total = 0, prefill = 0, rows = 0;
  for (const e of plan.entries) {
    const req = w.reqs.get(e.seqId);
    const seq = req?.seq;
    if (!seq || seq.status !== "running" || !w.live.has(e.seqId)) w.fail(`plan entry for sequence ${e.seqId}, which is not running`);
    if (seen.has(e.seqId)) w.fail(`sequence ${e.seqId} appears twice in the plan`);
    seen.add(e.seqId);
    const drafted = e.draft ?? 0;
    const own = e.tokens.slice(0, e.tokens.length - drafted);
    if (e.startPos !== seq.numComputed) w.fail(`entry of ${e.seqId} starts at ${e.startPos}, ${seq.numComputed} computed`);
    if (own.some((t, k) => t !== seq.tokens[e.startPos + k])) w.fail(`entry of ${e.seqId} feeds [${own}], not its tokens`);
    if (drafted > 0 && e.tokens.slice(own.length).some((t, k) => t !== seq.draft[k])) w.fail(`entry of ${e.seqId} feeds a draft that is not the proposed one`);
    if (e.sample !== (e.startPos + own.length === seq.tokens.length)) w.fail(`entry of ${e.seqId} samples ${e.sample} at ${e.startPos + own.length} of ${seq.tokens.length}`);
    if (e.blockTable.length * bs < e.startPos + e.tokens.length) w.fail(`entry of ${e.seqId} writes past its ${e.blockTable.length} blocks`);
    if (e.blockTable.join() !== seq.blockTable.join()) w.fail(`entry of ${e.seqId} has table [${e.blockTable}], the sequence [${seq.blockTable}]`);
    if (cfg.role === "prefill" && seq.numOutput > 0) w.fail(`prefill worker decodes sequence ${e.seqId}`);
    if (e.tokens.length > (cfg.longPrefillTokenThreshold ?? Infinity)) w.fail(`entry of ${e.seqId} feeds ${e.tokens.length} tokens, the per-sequence limit is ${cfg.longPrefillTokenThreshold}`);
    total += e.tokens.length;
    if (e.prefill) prefill += e.tokens.length;
    if (e.prefill && seq.hints.wholePrompt) rows += e.tokens.length;
  }
  if (plan.entries.length > cfg.maxRunning) w.fail(`plan has ${plan.entries.length} entries, the limit is ${cfg.maxRunning}`);
  if (total !== plan.numTokens || total > cfg.maxBatchTokens) w.fail(`plan feeds ${total} tokens (says ${plan.numTokens}), budget ${cfg.maxBatchTokens}`);
  if (prefill !== plan.numPrefillTokens) w.fail(`plan counts ${plan.numPrefillTokens} prefill tokens, entries ${prefill}`);
  if (rows > (cfg.maxPromptLogprobRows ?? Infinity)) w.fail(`plan scores ${rows} prompt rows, the limit is ${cfg.maxPromptLogprobRows}`);
  for (const id of plan.preempted) {
    const seq = w.reqs.get(id)?.seq;
    if (!seq || seq.status !== "waiting" || seen.has(id)) w.fail(`preempted sequence ${id} is ${seq?.status} (in plan: ${seen.has(id)})`);
  }
  for (const op of plan.swapOut) if (!plan.preempted.includes(op.seqId)) w.fail(`swap-out of ${op.seqId}, which was not preempted`);
  for (const op of plan.swapIn) if (!seen.has(op.seqId)) w.fail(`swap-in of ${op.seqId}, which is not in the plan`);
  for (const id of plan.truncated) {
    const seq = w.reqs.get(id)?.seq;
    if (seq?.status !== "finished" || seq.finishReason !== "length") w.fail(`truncated sequence ${id} is ${seq?.status} (${seq?.finishReason})`);
  }
}

/** queueState's waiting prefill tokens equal probing every waiting and running sequence afresh. */
export function checkQueueState(w: FuzzWorld): void {
  const { sched, kv } = w;
  const bs = w.shape.blockSize;
  let want = 0;
  for (const seq of sched.waitingSequences) {
    const cached = seq.numSwapped > 0 ? seq.numSwapped : seq.hints.wholePrompt ? 0 : kv.cachedPrefixTokens(seq.tokens.slice(0, -1), seq.hints.cacheRoot);
    const fresh = seq.numOutput === 0 && seq.preemptions === 0 && seq.numSwapped === 0;
    const handed = fresh && !seq.hints.wholePrompt && (kv.hasHandoffTail?.(seq.tokens, seq.hints.cacheRoot) ?? false) &&
      cached === (Math.ceil(seq.tokens.length / bs) - 1) * bs;
    want += handed ? 1 : seq.tokens.length - cached;
  }
  for (const id of w.live) {
    const seq = w.reqs.get(id)!.seq;
    if (seq.status === "running" && seq.inPrefill) want += Math.max(0, seq.promptLength - seq.numComputed);
  }
  const got = sched.queueState().waitingPrefillTokens;
  if (got !== want) w.fail(`queueState counts ${got} waiting prefill tokens, probing gives ${want}`);
}
