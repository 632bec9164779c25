/**
 * A server's life between serving and stopping: the generation responses still being written, and
 * a drain that turns new work away (503, and /health says "draining" so a load balancer stops
 * sending) while those finish. `serve` drains on SIGINT or SIGTERM before it stops.
 */

/** The longest delay `setTimeout` honours, in ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Counts open generation responses; drains them on shutdown. */
export class ServerLifecycle {
  private active = 0;
  private isDraining = false;
  private idle: (() => void)[] = [];

  /** True once a drain has begun: new generation requests are refused. */
  get draining(): boolean {
    return this.isDraining;
  }

  /** Generation responses not yet fully written (a stream counts until it closes or is cancelled). */
  get inFlight(): number {
    return this.active;
  }

  /** A generation response starts; call the returned function once, when it is fully written. */
  begin(): () => void {
    this.active++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.active--;
      if (this.active === 0) for (const wake of this.idle.splice(0)) wake();
    };
  }

  /**
   * `stream` as it is, except that `end` is called once when it has been read to the end, fails or
   * is cancelled by the client.
   */
  track(stream: ReadableStream<Uint8Array>, end: () => void): ReadableStream<Uint8Array> {
    const reader = stream.getReader();
    return new ReadableStream<Uint8Array>({
      async pull(ctl) {
        try {
          const { done, value } = await reader.read();
          if (done) {
            ctl.close();
            end();
          } else ctl.enqueue(value);
        } catch (e) {
          end();
          ctl.error(e);
        }
      },
      async cancel(reason) {
        end();
        await reader.cancel(reason);
      },
    });
  }

  /**
   * Refuses new generation requests from now on and resolves once none is in flight or `graceMs`
   * has passed (or `stopWaiting` resolves), with how many were still in flight then.
   */
  async drain(graceMs: number, stopWaiting?: Promise<unknown>): Promise<number> {
    this.isDraining = true;
    if (this.active === 0) return 0;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      new Promise<void>((r) => this.idle.push(r)),
      // Timers take at most 2^31 - 1 ms (about 24.8 days) and fire at once above it: a longer grace waits without one.
      ...(graceMs <= MAX_TIMER_MS ? [new Promise<void>((r) => (timer = setTimeout(r, graceMs)))] : []),
      ...(stopWaiting ? [stopWaiting] : []),
    ]);
    clearTimeout(timer);
    return this.active;
  }
}
