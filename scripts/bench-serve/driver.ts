/**
 * Plays sessions against a server: each session starts at its (time-scaled) offset, sends its turns
 * one after another with the tool gap between them, and carries the conversation forward so later
 * turns share the earlier turns' prefix. An optional concurrency cap turns the open loop into a
 * bounded one. Progress goes to stderr.
 */
import type { BenchOptions } from "./args.ts";
import { type ChatMessage, type RequestResult, timedRequest } from "./client.ts";
import type { Session } from "./workload.ts";

/** A counting semaphore for the concurrency cap. */
class Limiter {
  private active = 0;
  private readonly waiting: (() => void)[] = [];
  constructor(private readonly max: number) {}
  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.max > 0 && this.active >= this.max) await new Promise<void>((r) => this.waiting.push(r));
    this.active++;
    try {
      return await fn();
    } finally {
      this.active--;
      this.waiting.shift()?.();
    }
  }
}

/** A one-line progress bar redrawn in place on stderr. */
export class ProgressBar {
  private done = 0;
  private failed = 0;
  constructor(private readonly total: number, private readonly write: ((s: string) => void) | undefined) {}
  tick(ok: boolean): void {
    this.done++;
    if (!ok) this.failed++;
    if (!this.write) return;
    const width = 30;
    const filled = Math.round((width * this.done) / Math.max(1, this.total));
    this.write(`\r[${"#".repeat(filled)}${".".repeat(width - filled)}] ${this.done}/${this.total}  failed ${this.failed}`);
    if (this.done === this.total) this.write("\n");
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, Math.max(0, ms)));

/** Runs every session and returns all request results plus the wall time the run took. */
export async function runSessions(
  sessions: readonly Session[],
  o: BenchOptions,
  model: string,
  stderr?: (s: string) => void,
): Promise<{ results: RequestResult[]; durationMs: number }> {
  const now = () => performance.now();
  const t0 = now();
  const total = sessions.reduce((a, s) => a + s.turns.length, 0);
  const bar = new ProgressBar(total, o.quiet ? undefined : stderr);
  const limiter = new Limiter(o.concurrency);
  const results: RequestResult[] = [];
  const playOne = async (s: Session) => {
    await sleep(t0 + s.startMs - now());
    const messages: ChatMessage[] = s.system ? [{ role: "system", content: s.system }] : [];
    for (const turn of s.turns) {
      messages.push({ role: "user", content: turn.text });
      const r = await limiter.run(() =>
        timedRequest(
          {
            url: o.url,
            model,
            apiKey: o.apiKey,
            endpoint: o.endpoint,
            messages: [...messages],
            maxTokens: turn.maxTokens,
            ignoreEos: o.ignoreEos,
            timeoutMs: o.timeoutMs,
            sessionId: s.turns.length > 1 ? s.id : undefined,
          },
          now,
        )
      );
      results.push({ ...r, session: s.id, turn: s.turns.indexOf(turn) });
      bar.tick(r.ok);
      if (!r.ok) {
        // A failed turn ends the session: later turns would replay a conversation that never happened.
        for (let k = s.turns.indexOf(turn) + 1; k < s.turns.length; k++) bar.tick(false);
        break;
      }
      messages.push({ role: "assistant", content: r.text });
      await sleep(turn.gapAfterMs);
    }
  };
  await Promise.all(sessions.map(playOne));
  return { results, durationMs: now() - t0 };
}
