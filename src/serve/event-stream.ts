/**
 * Server-sent events named by their type (`event: TYPE` then `data: JSON`), as the Responses and
 * Anthropic Messages streams write them, for one generation: the client hanging up cancels it.
 */
import type { RequestHandle } from "../engine/engine-types.ts";

const encoder = new TextEncoder();

/** One event as SSE bytes: `event: TYPE` then `data: JSON`. */
export function namedEvent(e: { type: string }): Uint8Array {
  return encoder.encode(`event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
}

/**
 * A stream of `run`'s events. `run` sends batches of events and resolves when the answer is done;
 * `gone()` tells it the client left (then nothing more is sent, and it should store nothing). A write
 * that fails (the client went away mid-write) cancels the generation too.
 */
export function namedEventStream<E extends { type: string }>(
  handle: RequestHandle, run: (send: (events: readonly E[]) => void, gone: () => boolean) => Promise<void>,
): ReadableStream<Uint8Array> {
  let clientGone = false;
  return new ReadableStream<Uint8Array>({
    async start(controller) {
      const send = (events: readonly E[]) => events.forEach((e) => controller.enqueue(namedEvent(e)));
      try {
        await run(send, () => clientGone);
        if (!clientGone) controller.close();
      } catch (e) {
        // The client went away mid-write: stop generating for it.
        handle.cancel();
        if (clientGone) return;
        // Anything else (a bug while writing the answer) ends the response, which would otherwise stay open with nothing more to come.
        console.error(`Event stream failed: ${e instanceof Error ? e.message : String(e)}`);
        controller.error(e);
      }
    },
    cancel() {
      clientGone = true;
      handle.cancel();
    },
  });
}
