/**
 * Admission of new agent sessions under KV-memory pressure (ours). When turns wait for KV memory on
 * many workers at once, a new session only adds to the wait of sessions already in flight: its first
 * prompt takes blocks the returning turns need, and every turn it then makes competes again. Holding
 * new sessions at the front door for as long as that lasts (one enters as one leaves) keeps the
 * memory for the agents mid-task; the held ones pay in their first turn's TTFT.
 */
import type { WorkerSnapshot } from "./types.ts";

/** Knobs of {@link SessionAdmission}. */
export interface SessionAdmissionOptions {
  /** Hold new sessions once at least this fraction of serving workers has turns waiting for KV memory. */
  holdFraction?: number;
  /** Admit them again once at most this fraction has. */
  admitFraction?: number;
  /** Consecutive ticks a change must be wanted before it happens. */
  confirmTicks?: number;
  /** Longest a new session waits at the front door; then it enters whatever the pressure. */
  maxHoldS?: number;
}

/** Decides, tick by tick, whether new sessions are admitted or held (hysteresis between two fractions). */
export class SessionAdmission {
  private readonly o: Required<SessionAdmissionOptions>;
  private holding = false;
  private streak = 0;

  /** Creates the controller; new sessions are admitted until memory pressure is seen. */
  constructor(opts: SessionAdmissionOptions = {}) {
    this.o = { holdFraction: 0.25, admitFraction: 0.05, confirmTicks: 2, maxHoldS: 60, ...opts };
    if (!(this.o.admitFraction < this.o.holdFraction)) {
      throw new RangeError(`Session admission needs admitFraction below holdFraction; got ${this.o.admitFraction} and ${this.o.holdFraction}`);
    }
  }

  /** Longest a new session waits at the front door. */
  get maxHoldS(): number {
    return this.o.maxHoldS;
  }

  /** Whether new sessions are held now. */
  get holdingNewSessions(): boolean {
    return this.holding;
  }

  /**
   * Reads one tick's serving workers; returns the new state (true = hold new sessions) when it
   * changes, null otherwise. Workers that do not report memory waits count as not waiting.
   */
  update(live: readonly WorkerSnapshot[]): boolean | null {
    if (live.length === 0) return null;
    let waiting = 0;
    for (const w of live) if ((w.waitingForMemory ?? 0) > 0) waiting++;
    const f = waiting / live.length;
    const wantChange = this.holding ? f <= this.o.admitFraction : f >= this.o.holdFraction;
    this.streak = wantChange ? this.streak + 1 : 0;
    if (this.streak < this.o.confirmTicks) return null;
    this.streak = 0;
    this.holding = !this.holding;
    return this.holding;
  }
}
