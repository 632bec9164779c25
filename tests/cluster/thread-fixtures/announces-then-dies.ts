/**
 * An announcing thread (as nats-announcer-thread.ts) that says it started, then dies of an uncaught
 * error while announcing: what only a bug would do to the real one (nats-announcer.test.ts, `onLost`).
 */
import { parentThreadPort } from "../../../src/runtime/threads.ts";

const port = await parentThreadPort();
port.onMessage((m) => {
  if ((m as { kind?: string }).kind !== "start") return;
  port.post({ kind: "started" });
  setTimeout(() => {
    throw new RangeError("announcer bug");
  }, 50);
});
