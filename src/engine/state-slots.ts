/**
 * Which recurrent state slot each sequence holds, for models with Gated DeltaNet layers (PagedKv.state;
 * ForwardEntry.stateSlot). A sequence takes a slot at its first step (position 0, or where a state
 * checkpoint's copy starts it: `claim`) and keeps it until the engine lets it go (it ended, or was
 * preempted and will compute again). The state is not in the KV cache's blocks, so nothing can resume
 * a sequence mid-way without its slot, a checkpoint or a host copy of its state (swap preemption:
 * engine-runner.ts saves the slot with the blocks); a draft's verification keeps the state from before
 * it in a scratch slot to go back to (engine-runner.ts `rollbackState`), and prefix hits reach only as
 * far as a checkpoint (state-checkpoints.ts).
 */

/** Thrown when a step's sequence has no slot to run with. */
export class StateSlotError extends RangeError {
  override name = "StateSlotError";
}

/** Slot assignment over `slots` state slots. */
export class StateSlots {
  readonly #bySeq = new Map<number, number>();
  readonly #free: number[];

  constructor(readonly slots: number) {
    if (!Number.isInteger(slots) || slots < 1) throw new RangeError(`Invalid recurrent state slot count ${slots}`);
    this.#free = Array.from({ length: slots }, (_, i) => slots - 1 - i);
  }

  /** Slots held now. */
  get held(): number {
    return this.#bySeq.size;
  }

  /**
   * `entries` with their slots: a sequence at position 0 takes a free slot (or keeps its own, starting
   * it afresh); one further on must hold one. Entries of a negative seqId (the warm-up's, whose output
   * nobody reads) hold a free slot for this step only: call {@link endStep} after it.
   */
  assign<E extends { seqId: number; startPos: number }>(entries: readonly E[]): (E & { stateSlot: number })[] {
    const taken: number[] = [];
    try {
      return entries.map((e) => {
        let slot = e.seqId >= 0 ? this.#bySeq.get(e.seqId) : undefined;
        if (slot === undefined) {
          if (e.seqId >= 0 && e.startPos !== 0) {
            throw new StateSlotError(`Sequence ${e.seqId} continues at position ${e.startPos} without its recurrent state (this model's Gated DeltaNet layers keep no state in the KV cache)`);
          }
          slot = this.#free.pop();
          if (slot === undefined) throw new StateSlotError(`All ${this.slots} recurrent state slots are held; a step cannot run more sequences than --max-num-seqs`);
          taken.push(slot);
          if (e.seqId >= 0) this.#bySeq.set(e.seqId, slot);
          else this.#transient.push(slot);
        }
        return { ...e, stateSlot: slot };
      });
    } catch (err) {
      // Nothing of a refused step stays held.
      for (const s of taken) this.#giveBack(s);
      throw err;
    }
  }

  readonly #transient: number[] = [];

  /**
   * A free slot for `seqId`, which resumes from a copy of a state kept elsewhere (a checkpoint): its
   * steps then run from any position. Its own slot where it already holds one.
   */
  claim(seqId: number): number {
    const held = this.#bySeq.get(seqId);
    if (held !== undefined) return held;
    const slot = this.#free.pop();
    if (slot === undefined) throw new StateSlotError(`All ${this.slots} recurrent state slots are held; a step cannot run more sequences than --max-num-seqs`);
    this.#bySeq.set(seqId, slot);
    return slot;
  }

  /** The slot `seqId` holds, if any. */
  slotOf(seqId: number): number | undefined {
    return this.#bySeq.get(seqId);
  }

  /** Returns the slots of a step's negative-seqId entries. */
  endStep(): void {
    for (const s of this.#transient.splice(0)) this.#free.push(s);
  }

  /** Lets `seqId`'s slot go (it ended, or lost its computed tokens); nothing where it holds none. */
  release(seqId: number): void {
    const slot = this.#bySeq.get(seqId);
    if (slot === undefined) return;
    this.#bySeq.delete(seqId);
    this.#free.push(slot);
  }

  #giveBack(slot: number): void {
    for (const [seq, s] of this.#bySeq) if (s === slot) this.#bySeq.delete(seq);
    const t = this.#transient.indexOf(slot);
    if (t >= 0) this.#transient.splice(t, 1);
    this.#free.push(slot);
  }
}
