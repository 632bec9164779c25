/**
 * Waiting in tests for what another thread, process, socket or later turn of the event loop does
 * "soon". The deadline only turns a hang into a failure: it is generous because CI runs the suite on
 * a shared, sometimes heavily loaded 2-core machine, and a normal run returns as soon as the
 * condition holds. Speed is measured by the benchmark scripts, never here.
 */

/** How long {@link eventually} waits by default: far past any normal run, short of a hung CI job. */
export const EVENTUALLY_MS = 30_000;

/**
 * Reads `read()` until `done` holds for what it returns or `timeoutMs` has passed, and returns the
 * last value read: the caller asserts on it, so a timeout fails with the caller's own message.
 */
export async function eventually<T>(read: () => T | Promise<T>, done: (value: T) => boolean, timeoutMs = EVENTUALLY_MS, everyMs = 10): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let value = await read();
  while (!done(value) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, everyMs));
    value = await read();
  }
  return value;
}
