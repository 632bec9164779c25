/**
 * Where each live session of the simulator was served last (its home), with the count per worker the
 * session router reads (`RouteCandidate.liveSessions`): a session counts from its first placement until
 * its last turn ends, tool waits included, as a worker's agent-aware tracker counts running and
 * tool-waiting sessions in the real cluster.
 */
export class SessionHomes {
  private readonly homes = new Map<string, string>();
  private readonly counts = new Map<string, number>();

  /** The worker that decoded `sessionId`'s last turn, if it is live. */
  get(sessionId: string): string | undefined {
    return this.homes.get(sessionId);
  }

  /** `sessionId`'s turn now runs on `workerId` (it leaves its previous home, if another). */
  set(sessionId: string, workerId: string): void {
    const before = this.homes.get(sessionId);
    if (before === workerId) return;
    if (before !== undefined) this.counts.set(before, this.counts.get(before)! - 1);
    this.homes.set(sessionId, workerId);
    this.counts.set(workerId, (this.counts.get(workerId) ?? 0) + 1);
  }

  /** `sessionId` ended (its last turn done, or rejected). */
  delete(sessionId: string): void {
    const before = this.homes.get(sessionId);
    if (before === undefined) return;
    this.homes.delete(sessionId);
    this.counts.set(before, this.counts.get(before)! - 1);
  }

  /** Live sessions whose home is `workerId`. */
  count(workerId: string): number {
    return this.counts.get(workerId) ?? 0;
  }
}
