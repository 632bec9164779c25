/**
 * Ours: every tick (~1 s) estimate rates online (no offline profile), predict P95 TTFT and ITL for
 * every role mix of the fixed worker set (prefill, decode and mixed workers, from all-mixed to every
 * disaggregated split), and flip roles toward the best mix.
 * Anti-flapping: a move must beat the current split by a margin (after charging its switch cost),
 * must be wanted on consecutive ticks unless the SLO is already badly missed, is rate-limited per
 * tick, and a flipped worker cools down before it can flip again.
 */
import { allMixes, chooseFlips, countRoles, flipsBetween, moveDirection, type RoleMix } from "./role-mix.ts";
import type { StepCoefficients } from "./step-model.ts";
import { RateEstimates } from "./rate-estimates.ts";
import { StepMixingChoice, StepPricing, type StepContexts } from "./step-pricing.ts";
import { ItlAdmission } from "./itl-admission.ts";
import { SessionAdmission } from "./session-admission.ts";
import { ONLINE_PLANNER_DEFAULTS, type OnlinePlannerOptions } from "./online-planner-options.ts";

export type { OnlinePlannerOptions } from "./online-planner-options.ts";
import type { MetricsSnapshot, Planner, PlannerAction, WorkerSnapshot } from "./types.ts";
import { cleanSnapshot } from "./snapshot-guard.ts";

/** Prefill workers with no decode worker to send them prompts (mixed workers prefill their own). */
function idlePrefill(mix: RoleMix): boolean {
  return mix.prefill > 0 && mix.decode === 0 && mix.mixed > 0;
}

/** Online, measurement-driven role planner. */
export class OnlinePlanner implements Planner {
  readonly name = "online";
  readonly intervalS: number;
  private readonly o: Required<OnlinePlannerOptions>;
  private pending: { dir: string; ticks: number } | null = null;
  private readonly lastFlip = new Map<string, number>();
  private lastNow = 0;
  private stepsSeen = false;
  private threshold: number;
  private readonly steps = new StepPricing();
  private readonly rates: RateEstimates;
  private readonly mixing: StepMixingChoice;
  private readonly admission: SessionAdmission | null;
  private readonly itlAdmission: ItlAdmission | null;

  /** Creates the planner with the given knobs. */
  constructor(opts: OnlinePlannerOptions = {}) {
    this.o = { ...ONLINE_PLANNER_DEFAULTS, ...opts };
    this.intervalS = this.o.intervalS;
    this.rates = new RateEstimates(this.o.mixedChunkTokens);
    this.mixing = new StepMixingChoice(this.o.initialSplitSteps);
    const adm = this.o.sessionAdmission;
    this.admission = adm === false ? null : new SessionAdmission(adm === true ? {} : adm);
    const ia = this.o.itlAdmission;
    this.itlAdmission = ia === false ? null : new ItlAdmission(ia === true ? {} : ia);
    this.threshold = this.o.initialLocalPrefill;
  }

  /** Online estimates, for logs and tests. */
  estimates(): { prefillRate: number; mixedRate: number; chunkStepS: number; demand: number; decodeDemand: number; stepA: number; stepB: number } {
    return {
      prefillRate: this.rates.prefillRate, mixedRate: this.rates.mixedRate, chunkStepS: this.rates.chunkStepS, demand: this.rates.demand,
      decodeDemand: this.rates.decodeDemand, stepA: this.rates.stepA, stepB: this.rates.stepB,
    };
  }

  /** The online step model's current fit (null before it has one). */
  stepModelCoefficients(): StepCoefficients | null {
    return this.steps.coefficients();
  }

  /** Current local-prefill threshold (uncached tokens a decode worker prefills itself). */
  localPrefillThreshold(): number {
    return this.threshold;
  }

  /**
   * Predicted [P95 TTFT, ITL] with `p` prefill workers and the other `n − p` decoding, from the
   * online estimates. Same as {@link predictMix} with no mixed workers.
   */
  predict(p: number, n: number, backlog: number, decodeSeqs: number, meanUncached: number): [number, number] {
    return this.predictMix({ prefill: p, decode: n - p, mixed: 0 }, backlog, decodeSeqs, meanUncached);
  }

  /**
   * Predicted [P95 TTFT, ITL] for a role mix. Decode and mixed workers form one decode pool; it also
   * prefills the share of prompts that stay local (all of them on mixed workers, the measured local
   * share on decode workers, everything when no worker prefills). Rates are measured, per kind of
   * step: prefill workers' tokens/s, and the pool's tokens/s over the steps that carried a prefill
   * chunk together with its decodes (in a compute-bound chunk step the decodes ride almost free, so
   * a pool worker's prefill capacity is close to a prefill worker's — that is measured, not assumed).
   * A pool worker spends a fraction ρ of its time in chunk steps (measured mean length) and the rest
   * in decode-only steps of a + B·batch; its mean ITL is the mean step, with batch = λ·ITL (Little).
   * Prefill: queue drain plus an M/M/1-like P95 wait per pool; past saturation the queue grows for
   * the next HORIZON seconds. Past the batch limit ITL stretches by demand ÷ capacity.
   * `prefillDemand` (uncached prompt tokens/s) and `ctx` (the contexts steps are priced at) default to
   * the measured ones; ITL admission passes what the pool's sessions will bring.
   */
  predictMix(mix: RoleMix, backlog: number, decodeSeqs: number, meanUncached: number, decodeDemand = this.rates.decodeDemand, prefillDemand = this.rates.demand, ctx?: StepContexts): [number, number] {
    const p = mix.prefill, dc = mix.decode + mix.mixed;
    const sm = this.o.stepModel && this.steps.ready ? this.steps : null;
    // A decode worker holds at most its batch limit, and no more sequences than its KV memory fits.
    const max = sm ? sm.batchLimit(this.o.maxDecodeBatch) : this.o.maxDecodeBatch;
    const held = decodeSeqs / Math.max(1, dc); // sequences each decoding worker holds now
    // Step model: a prefill worker's full-chunk step, a pool worker's chunk step (this.chunkStep) and
    // decode step at its batch.
    const rateP = sm ? this.o.prefillChunkTokens / sm.prefillStep(this.o.prefillChunkTokens, ctx) : Math.max(1, this.rates.prefillRate || this.rates.mixedRate);
    const rateM = sm ? Math.max(1, this.o.mixedChunkTokens - held) / this.chunkStep(sm, held, ctx) : Math.max(1, this.rates.mixedRate || this.rates.prefillRate);
    const a = this.rates.stepA, B = this.rates.stepB;
    const tChunk = this.rates.chunkStepS > 0 ? this.rates.chunkStepS : a + this.o.mixedChunkTokens / rateM;
    const share = p === 0 ? 1 : dc === 0 ? 0 : (mix.mixed + this.rates.localShare * mix.decode) / dc;
    const capP = p * rateP, capM = dc * rateM;
    // The backlog drains on the workers that take prompts: decode workers only take their local share,
    // and prefill workers only what decode workers send them (mixed workers prefill their own prompts).
    const drain = backlog / Math.max(1e-9, (share < 1 ? capP : 0) + share * capM);
    const ttft = drain + Math.max(
      p > 0 ? this.queueTtft(prefillDemand * (1 - share), capP, meanUncached / rateP) : 0,
      share > 0 ? this.queueTtft(prefillDemand * share, capM, meanUncached / rateM) : 0,
    );
    if (dc <= 0) return [ttft, 1e3];
    const lambda = Math.max(decodeDemand, 0) / dc; // output tokens/s per pool worker
    const rho = Math.min(0.99, (prefillDemand * share) / Math.max(1e-9, capM));
    // Fixed point of ITL = 1 / (ρ/tChunk + (1−ρ)/(a + B·λ·ITL)), batch at least what is held now.
    let itl = a;
    for (let i = 0; i < 30; i++) {
      const b = Math.min(max, Math.max(held, lambda * itl));
      const pure = sm ? sm.decodeStep(b, ctx) : a + B * b;
      const next = 1 / (rho / (sm ? this.chunkStep(sm, b, ctx) : tChunk) + (1 - rho) / pure);
      if (Math.abs(next - itl) < 1e-7) { itl = next; break; }
      itl = next;
    }
    const b = lambda * itl;
    if (b > max || held > max) {
      const capTok = max / (sm ? sm.decodeStep(max, ctx) : a + B * max);
      itl *= Math.max(lambda / capTok, held / max, 1);
    }
    if (sm) {
      // A decode pool near its batch limit stops taking finished prefills: their KV waits, memory
      // fills, and new prompts wait too. Count that in TTFT as a saturated prefill queue is counted.
      const over = Math.max(lambda * sm.decodeStep(max, ctx) / max, held / max);
      if (over > 0.9) return [ttft + 10 * (over - 0.9), itl];
    }
    return [ttft, itl];
  }

  /**
   * The admission action of this tick, if any: new sessions held while turns wait for KV memory, and
   * (with a fitted step model) how many may enter before the next tick within the ITL target.
   */
  private admissionActions(s: MetricsSnapshot, live: readonly WorkerSnapshot[], cur: RoleMix, backlog: number, seqs: number, meanUncached: number, sm: boolean): PlannerAction[] {
    const mem = this.admission, itl = this.itlAdmission;
    const hold = mem?.update(live) ?? null;
    itl?.observe(s.completions);
    itl?.observeLoad(s.now, seqs, s.completions, this.o.itlTargetS);
    // An early fit from a few seconds of steps misprices batches it has not seen: wait for a few.
    if (itl === null || !sm || this.steps.fits < 3 || live.length === 0) {
      return hold === null ? [] : [{ kind: "admission", holdNewSessions: hold, maxHoldS: mem!.maxHoldS }];
    }
    // Measured ITL: the sequences held over the window each got one token per ITL (Little's law). The
    // sequences are counted at the tick, so a window's figure is noisy; weighted by its tokens (and
    // counting windows that end with none held), the windows average to sequences ÷ tokens.
    let tokens = 0;
    for (const w of live) tokens += w.decodeTokens;
    const measured = tokens > 0 ? { itlS: (seqs * s.windowS) / tokens, tokens } : null;
    const demand = itl.pricesDemand ? this.rates.decodeDemand : 0;
    // With agedPricing, the pool is priced as its sessions will be: at the highest prefill and decode
    // contexts of the last minutes, or higher while they rise (an agent session's every turn attends
    // to all it has said before, so its prefill and decode grow dearer as it ages: rising contexts are
    // carried lookaheadS along their trend), and with each extra sequence bringing the
    // prefill tokens/s a held one brings now (read once the pool holds a few per worker). The model
    // is still scaled to the measured ITL at today's contexts (modelNow).
    const aged = itl.pricesAged; // the step model is ready here (guard above)
    const ahead = aged && itl.lookaheadS > 0 && itl.measuredItlS >= itl.lookaheadFrom * itl.aim() * this.o.itlTargetS;
    const ctx = aged ? this.steps.contexts(true, ahead ? itl.lookaheadS / this.intervalS : 0) : undefined;
    const perSeq = aged && seqs >= 4 * live.length ? this.rates.demand / seqs : 0;
    const modelNow = aged ? this.predictMix(cur, backlog, seqs, meanUncached, demand)[1] : undefined;
    const budget = itl.budget((extra) => this.predictMix(cur, backlog, seqs + extra, meanUncached, demand, this.rates.demand + perSeq * extra, ctx)[1], measured, this.o.itlTargetS, live.length, seqs, modelNow);
    // An idle pool (nothing decoding, no prompt waiting) takes one new session whatever the model says:
    // it slows nobody, and only decoding measures the pool again. Without it a target the pool cannot
    // meet even for one sequence (or a scale left high by one slow window) shut a real server's door
    // for good once its sessions had left (bench-agent-kv at a 4 ms target on the reference backend).
    const newSessions = seqs === 0 && backlog === 0 ? Math.max(1, budget) : budget;
    const memHolding = mem?.holdingNewSessions ?? false;
    return [{
      kind: "admission", holdNewSessions: memHolding, newSessions,
      // A session held for KV memory keeps that hold's terms; otherwise no room by the next tick turns it away.
      maxHoldS: memHolding ? mem!.maxHoldS : itl.maxWaitS, rejectAfterHold: !memHolding,
    }];
  }

  /**
   * Seconds of a pool worker's chunk step beside `b` decodes. Splits are priced with the step mixing
   * the fit prefers, even before workers switch to it. A method rather than a closure in
   * {@link predictMix}: that runs for every mix on every tick, and a closure per call (named at
   * creation under tsx) cost about 8% of a simulated run.
   */
  private chunkStep(sm: StepPricing, b: number, ctx?: StepContexts): number {
    return this.mixing.wanted ? sm.splitChunkStep(b, this.o.mixedChunkTokens, ctx) : sm.chunkStep(b, this.o.mixedChunkTokens, ctx);
  }

  /** P95 TTFT of a pool with capacity `cap` tokens/s serving `load` tokens/s. */
  private queueTtft(load: number, cap: number, service: number): number {
    const HORIZON = 10;
    const rho = load / Math.max(1e-9, cap);
    const r = Math.min(rho, 0.95);
    return service + (3 * service * r) / (1 - r) + (rho > 0.95 ? HORIZON * (rho - 0.95) : 0);
  }

  /** One planning step. */
  tick(snapshot: MetricsSnapshot): PlannerAction[] {
    // Measured inputs: a NaN or negative reading must not poison the estimates for good.
    const s = cleanSnapshot(snapshot, this.intervalS, this.lastNow);
    this.lastNow = s.now;
    this.forgetCooledFlips(s.now);
    const live = s.workers.filter((w) => w.state === "serving");
    this.learn(s, live);
    const n = live.length;
    const cur = countRoles(live);
    const backlog = live.reduce((a, w) => a + w.waitingPrefillTokens, 0);
    const seqs = live.reduce((a, w) => a + w.decodeBatch + w.waitingDecodes, 0);
    const meanUncached = s.arrivals > 0 ? s.arrivedUncachedTokens / s.arrivals : 1000;
    const sm = this.o.stepModel && this.steps.ready;
    const admit = this.admissionActions(s, live, cur, backlog, seqs, meanUncached, sm);
    if (n < 2) return admit;
    // Mixed or separate steps first: it is the cheaper change (no drain, no transfer), and it changes
    // what every split costs (with 100 ms mixed steps, the planner moved 11 workers into prefill in the
    // first seconds of a simulated coding run, then stayed at 5 prefill workers the mixed ones hardly fed).
    // Priced at the chunks workers run, not the budget: a 100 ms mixed-step cost is 1% of a full 8192-token
    // chunk's step and a third of a 300-token one's (sim-validation.md, "Mixed steps made dear").
    const batch = seqs / Math.max(1, cur.mixed + cur.decode);
    const chunk = this.steps.chunkTokens > 0 ? Math.min(this.o.mixedChunkTokens, this.steps.chunkTokens + batch) : this.o.mixedChunkTokens;
    const switched = sm && this.o.adaptStepMixing ? this.mixing.update(this.steps, batch, chunk) : null;
    const stepActions: PlannerAction[] = switched === null ? [] : [{ kind: "step-mixing", split: switched }];
    const pressure = (mix: RoleMix) => {
      const [t, i] = this.predictMix(mix, backlog, seqs, meanUncached);
      const rt = t / this.o.ttftTargetS, ri = i / this.o.itlTargetS;
      if (!sm) {
        // SLO risk (the worse ratio) plus latency itself, so light load still prefers the faster mix.
        return Math.max(rt, ri) + 0.5 * (rt + ri);
      }
      // With the step model: also the mean end-to-end latency (half the P95 TTFT as the mean wait,
      // plus the mean output at the predicted ITL) against what the two SLOs allow, so a split that
      // buys TTFT with ITL on long outputs is seen for what it costs.
      const osl = Math.max(1, this.rates.meanOutput);
      const re = (0.5 * t + osl * i) / (this.o.ttftTargetS + osl * this.o.itlTargetS);
      return Math.max(rt, ri, re) + 0.5 * (rt + ri + re);
    };
    let best = cur;
    let bestCost = pressure(cur);
    const current = bestCost;
    const flipScale = Math.min(1, current);
    for (const mix of allMixes(n)) {
      if (!this.o.allowMixed && mix.mixed > 0) continue;
      // Without prefill workers decode workers prefill everything locally: that is all-mixed, named so.
      if (this.o.allowMixed && mix.prefill === 0 && mix.decode > 0) continue;
      // Without decode workers, prefill workers get no prompts (mixed workers prefill their own): idle.
      if (idlePrefill(mix)) continue;
      const f = flipsBetween(cur, mix);
      if (f.intoPrefill + f.outOfPrefill + f.other === 0) continue;
      // Draining decodes to prefill costs most; leaving prefill or switching decode↔mixed costs little.
      // A flip's transient hurts in proportion to how loaded the cluster is.
      const c = pressure(mix) + flipScale * this.o.flipCost * (f.intoPrefill + 0.25 * f.outOfPrefill + 0.1 * f.other);
      if (c < bestCost - 1e-12) { best = mix; bestCost = c; }
    }
    const actions: PlannerAction[] = [...admit, ...stepActions, ...this.adaptThreshold(cur, backlog, seqs, meanUncached)];
    // No role flips while workers report steps but the step model has no fit yet, or (adapting step
    // mixing) fewer than two fits (the rates and the fit of the first seconds misprice mixed steps: with 100 ms mixed steps the planner flipped two
    // workers to prefill 3 s into a simulated coding run, where none were needed), nor while workers
    // are about to change step mixing (a flip would be priced for steps they do not run yet).
    // Once any worker has reported steps: a quiet tick whose windows carry none must not lift the guard
    // (the simulator, idle for a second, flipped a role at 6 s where the real server waited for two fits).
    if (this.o.stepModel && live.some((w) => w.steps !== undefined && w.steps.length > 0)) this.stepsSeen = true;
    const measured = this.stepsSeen;
    if (measured && (!sm || (this.o.adaptStepMixing && this.mixing.pending))) { this.pending = null; return actions; }
    // Idle prefill workers are put back to work without the margin: nothing is gained by keeping them.
    const worthIt = best !== cur && (idlePrefill(cur) || bestCost < current * (1 - this.o.margin));
    if (!worthIt) { this.pending = null; return actions; }
    const urgent = current > 2;
    const dir = moveDirection(cur, best);
    if (this.pending === null || this.pending.dir !== dir) this.pending = { dir, ticks: 0 };
    this.pending.ticks++;
    if (!urgent && this.pending.ticks < this.o.confirmTicks) return actions;
    const maxFlips = Math.max(1, Math.ceil(n * this.o.maxFlipFraction));
    const flips = chooseFlips(live, best, maxFlips, (w) => s.now - (this.lastFlip.get(w.id) ?? -Infinity) >= this.o.cooldownS);
    for (const f of flips) if (f.kind === "flip") this.lastFlip.set(f.workerId, s.now);
    actions.push(...flips);
    this.pending = null;
    return actions;
  }

  /**
   * Drops cooldowns that have run out: they no longer restrain a flip, and a cluster whose workers
   * come and go under new names would otherwise keep one entry per worker it ever flipped.
   */
  private forgetCooledFlips(now: number): void {
    for (const [id, t] of this.lastFlip) if (now - t >= this.o.cooldownS) this.lastFlip.delete(id);
  }

  private adaptThreshold(mix: RoleMix, backlog: number, seqs: number, mu: number): PlannerAction[] {
    const [ttft, itl] = this.predictMix(mix, backlog, seqs, mu);
    let t = this.threshold;
    // Decode has headroom and prefill is the pressure: let decode workers absorb more prefill locally.
    if (itl < 0.6 * this.o.itlTargetS && ttft > 0.5 * this.o.ttftTargetS) t *= 1.25;
    else if (itl > 0.9 * this.o.itlTargetS) t *= 0.8;
    t = Math.round(Math.min(this.o.maxLocalPrefill, Math.max(this.o.minLocalPrefill, t)));
    if (t === this.threshold) return [];
    this.threshold = t;
    return [{ kind: "local-prefill-threshold", tokens: t }];
  }

  private learn(s: MetricsSnapshot, live: WorkerSnapshot[]): void {
    if (this.o.stepModel) this.steps.learn(live);
    this.rates.learn(s, live);
  }
}
