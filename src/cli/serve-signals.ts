/** `serve`'s shutdown on SIGINT or SIGTERM: drain what is in flight, then stop. */
import { exitProcess, onShutdownSignal } from "../runtime/env.ts";
import type { RunningServer } from "../serve/server.ts";

/**
 * On SIGINT or SIGTERM: refuse new work, let what is in flight finish for up to `graceS` seconds
 * (a second signal cuts that short), cancel the rest, stop the engines and close the step log, exit 0.
 */
export function stopOnSignal(s: RunningServer, graceS: number): void {
  let stopping = false;
  let stopNow = () => {};
  const secondSignal = new Promise<void>((r) => (stopNow = r));
  onShutdownSignal((signal) => {
    if (stopping) {
      console.error(`serve: ${signal} again: cancelling the requests left`);
      return stopNow();
    }
    stopping = true;
    console.error(`serve: ${signal}: finishing ${s.inFlight} request${s.inFlight === 1 ? "" : "s"} in flight (up to ${graceS} s; send ${signal} again to stop now)`);
    void (async () => {
      try {
        const left = await s.drain(graceS * 1000, secondSignal);
        await s.shutdown();
        console.error(`serve: stopped${left > 0 ? ` (${left} request${left === 1 ? "" : "s"} cancelled)` : ""}`);
        exitProcess(0);
      } catch (e) {
        console.error(`serve: could not stop cleanly: ${e instanceof Error ? e.message : String(e)}`);
        exitProcess(1);
      }
    })();
  });
}
