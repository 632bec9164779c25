/**
 * A request handle whose stream and result come from a handle made later: the cluster answers a
 * request at once, then moves KV (a prefill on another worker, or a prefix from a peer) before the
 * worker that decodes it takes it. Cancelling before then stops the hop in progress.
 */
import type { GenerateResult, RequestHandle, StreamDelta } from "../engine/engine-types.ts";
import { isRefusal } from "./worker-protocol.ts";

/**
 * Wraps `start` (resolving to the decoding worker's handle) as a handle available now. A typed refusal
 * from the hop or the decoding worker (its queue is full, its engine refuses the request) is the
 * handle's `refusal` and its result's `refused`, known once the hop is done.
 */
export function relayHandle(
  id: number, promptTokens: number, sessionId: string | undefined, start: Promise<RequestHandle>, cancelHop: () => void,
): RequestHandle {
  let inner: RequestHandle | undefined;
  let cancelled = false;
  const ready = start.then((h) => {
    inner = h;
    if (cancelled) h.cancel();
    return h;
  });
  const failed = (e: unknown): GenerateResult => ({
    text: "", tokenIds: [], finishReason: "abort", promptTokens, completionTokens: 0, cachedTokens: 0,
    ...(cancelled ? {} : { error: e instanceof Error ? `${e.name}: ${e.message}` : String(e), ...(isRefusal(e) ? { refused: e } : {}) }),
  });
  const result = ready.then((h) => h.result, failed);
  const refusal = ready.then((h) => h.refusal ?? undefined, (e) => (!cancelled && isRefusal(e) ? e : undefined));
  const cancel = () => {
    if (cancelled) return;
    cancelled = true;
    if (inner) inner.cancel();
    else cancelHop();
  };
  const stream: AsyncIterable<StreamDelta> = {
    async *[Symbol.asyncIterator]() {
      let h: RequestHandle;
      try {
        h = await ready;
      } catch {
        return; // the result carries the error
      }
      // Delegating hands a consumer's early exit to the inner stream, which cancels the request.
      yield* h.stream;
    },
  };
  return {
    id, stream, result, cancel, refusal,
    get sessionId() {
      return inner?.sessionId ?? sessionId;
    },
  };
}
