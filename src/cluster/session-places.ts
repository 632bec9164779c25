/**
 * Where each session was served last, for the router's session affinity and for tool waits: the most
 * recent sessions only (the oldest forgotten first), so a server that sees sessions without end keeps
 * a bounded map.
 */

/** Sessions remembered at most by default. */
const MAX_SESSIONS = 65536;

/** The worker that served each of the latest sessions last. */
export class SessionPlaces {
  private readonly last = new Map<string, string>();

  constructor(private readonly max: number = MAX_SESSIONS) {}

  /** The worker that served `sessionId` last, if it is remembered. */
  get(sessionId: string): string | undefined {
    return this.last.get(sessionId);
  }

  /** Whether `sessionId` is remembered. */
  has(sessionId: string): boolean {
    return this.last.has(sessionId);
  }

  /** Forgets `sessionId`. */
  delete(sessionId: string): void {
    this.last.delete(sessionId);
  }

  /** Remembers that `workerId` served `sessionId` last (as the latest session: forgotten last). */
  remember(sessionId: string, workerId: string): void {
    this.last.delete(sessionId);
    this.last.set(sessionId, workerId);
    if (this.last.size > this.max) this.last.delete(this.last.keys().next().value!);
  }
}
