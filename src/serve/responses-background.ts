/**
 * Background responses (`background: true` on `POST /v1/responses`): the generation runs without the
 * client's connection. The POST answers at once with the response `queued` (or streams its events,
 * and hanging up then does not stop it); `GET /v1/responses/{id}` reads where it stands (`queued`
 * until its first token, `in_progress`, then as stored), `?stream=true&starting_after=N` replays its
 * events after the N-th and follows the rest; `POST /v1/responses/{id}/cancel` stops it (status
 * `cancelled`; cancelling again returns the same response). A finished run is stored like any
 * response, and the events of the last `keptLogs` finished runs stay, so that a stream resumed just
 * after the end still gets the rest.
 */
import { ApiError } from "./errors.ts";
import { namedEvent } from "./event-stream.ts";
import type { ServeContext } from "./openai.ts";
import { failure } from "./respond.ts";
import { jsonSize, type ResponseStore } from "./response-store.ts";
import { generate, outputOf, type ResponsesState, type ResponseTurn, responseJson, settle } from "./responses.ts";
import type { ResponseEvent, ResponseOutput } from "./responses-output.ts";

type Json = Record<string, unknown>;

/** The events of a response's stream, as SSE: those after `after`, then (while it runs) the rest as they come. */
type Follow = (send: (events: readonly ResponseEvent[]) => void) => () => void;

/** One background response while it runs. */
class Run {
  readonly events: ResponseEvent[] = [];
  readonly listeners = new Set<(events: readonly ResponseEvent[]) => void>();
  status: "queued" | "in_progress" = "queued";
  cancelled = false;
  /** Resolves with the finished response. */
  done!: Promise<Json>;

  constructor(readonly turn: ResponseTurn, readonly out: ResponseOutput) {}

  /** The response as it stands: its output items so far, no usage yet. */
  response(): Json {
    return { ...this.turn.shell, status: this.status, output: JSON.parse(JSON.stringify(this.out.items)), usage: null };
  }

  emit(events: readonly ResponseEvent[]): void {
    if (events.length === 0) return;
    this.events.push(...events);
    for (const listen of this.listeners) listen(events);
  }
}

/**
 * Characters of event JSON the finished runs' logs keep by default. A log holds every delta of its
 * run (a 32k-token answer is tens of MB of events), so a count alone lets 64 long runs hold GBs; the
 * logs only serve streams resumed just after the end (the response itself is in the store).
 */
export const DEFAULT_KEPT_LOG_CHARS = 64 * 2 ** 20;

/** The background responses of one server: those running, and the event logs of the last finished. */
export class BackgroundRuns {
  readonly #running = new Map<string, Run>();
  // With each log, the store its response went to: a response deleted (or evicted) there has no events to replay.
  readonly #logs = new Map<string, { events: readonly ResponseEvent[]; responses: ResponseStore; size: number }>();
  #logChars = 0;

  /**
   * `keptLogs`: how many finished runs' events are kept for resumed streams; `keptChars`: how many
   * characters of their JSON, in all (the oldest logs dropped first; a log larger alone is not kept).
   */
  constructor(readonly keptLogs = 64, readonly keptChars = DEFAULT_KEPT_LOG_CHARS) {}

  /** How many finished runs' event logs are kept, and the characters of their JSON. */
  get keptLogSize(): { logs: number; chars: number } {
    return { logs: this.#logs.size, chars: this.#logChars };
  }

  /** Whether response `id` is a background response still running. */
  running(id: string): boolean {
    return this.#running.has(id);
  }

  /** Response `id` as it stands while it runs (undefined: not running). */
  current(id: string): Json | undefined {
    return this.#running.get(id)?.response();
  }

  /** The input items of running response `id` (undefined: not running). */
  inputItems(id: string): Json[] | undefined {
    return this.#running.get(id)?.turn.inputItems;
  }

  /**
   * Starts turn `t` in the background; `end` is called once it has finished (the server counts it in
   * flight until then). Returns the response as it stands (queued).
   */
  start(ctx: ServeContext, state: ResponsesState, t: ResponseTurn, end: () => void): Json {
    const out = outputOf(ctx, t);
    const run = new Run(t, out);
    this.#running.set(t.id, run);
    run.emit([out.event("response.created", { response: run.response() }), out.event("response.queued", { response: run.response() })]);
    run.done = (async () => {
      try {
        const r = await generate(t, out, (events) => {
          if (run.status === "queued" && events.length > 0) {
            run.status = "in_progress";
            // The first batch was numbered as it was built, before this event: the event goes first,
            // with the batch's first number, and the batch after it, so the numbers stay in order.
            const started = out.event("response.in_progress", { response: { ...run.response(), output: [] } });
            const numbers = [...events.map((e) => e.sequence_number), started.sequence_number];
            const ordered = [started, ...events];
            ordered.forEach((e, i) => (e.sequence_number = numbers[i]));
            run.emit(ordered);
            return;
          }
          run.emit(events);
        }).catch((e: unknown) => {
          // A bug while building the output (a parser's, say): the run fails and its generation stops,
          // rather than the rejection going unhandled (which ends the process) with the run never stored.
          t.submitted.handles[0].cancel();
          return new ApiError(500, `The response failed while its output was built: ${e instanceof Error ? e.message : String(e)}`, null, "server_error");
        });
        const result = r instanceof ApiError ? null : r;
        const err: ApiError | undefined = result ? failure([result], t.submitted.params) : r as ApiError;
        let response = responseJson(t, out, result, err);
        const cancelled = !err && run.cancelled && result?.finishReason === "abort";
        if (cancelled) response = { ...response, status: "cancelled", incomplete_details: null };
        // Kept to be read back, but a conversation gets a turn's items only once it has completed (as
        // when a client hangs up on a foreground turn): a cancelled one would leave its input unanswered.
        if (!err) settle(ctx, state, cancelled ? { ...t, conversation: null } : t, out, response);
        else if (t.store) state.responses.put({ id: t.id, response, inputItems: t.inputItems, input: t.input, output: [], previousId: t.previousId, sessionId: t.sessionId ?? t.id });
        const final = err ? "response.failed" : response.status === "completed" ? "response.completed" : "response.incomplete";
        run.emit([out.event(final, { response })]);
        return response;
      } finally {
        this.#running.delete(t.id);
        this.#keepLog(t.id, run.events, state.responses);
        for (const listen of run.listeners) listen([]);
        run.listeners.clear();
        end();
      }
    })();
    return run.response();
  }

  /** Keeps a finished run's events, dropping the oldest logs past the count and the size bounds. */
  #keepLog(id: string, events: readonly ResponseEvent[], responses: ResponseStore): void {
    const size = jsonSize(events);
    if (size <= this.keptChars) {
      this.#logs.set(id, { events, responses, size });
      this.#logChars += size;
    }
    while (this.#logs.size > this.keptLogs || this.#logChars > this.keptChars) {
      const [oldest, log] = this.#logs.entries().next().value!;
      this.#logs.delete(oldest);
      this.#logChars -= log.size;
    }
  }

  /**
   * Cancels running response `id` and resolves with it once it has stopped (undefined: not running).
   * Tokens already generated stay in its output.
   */
  cancel(id: string): Promise<Json> | undefined {
    const run = this.#running.get(id);
    if (!run) return undefined;
    run.cancelled = true;
    run.turn.submitted.handles[0].cancel();
    return run.done;
  }

  /**
   * The events of response `id` after sequence number `after`, then, while it runs, the rest as they
   * come; undefined when it neither runs nor has its events kept (nor is still stored: once deleted,
   * its events go with it). `send([])` ends the stream.
   */
  follow(id: string, after: number): Follow | undefined {
    const run = this.#running.get(id);
    const kept = this.#logs.get(id);
    const log = run?.events ?? (kept?.responses.has(id) ? kept.events : undefined);
    if (!log) return undefined;
    return (send) => {
      const past = log.filter((e) => e.sequence_number > after);
      if (past.length > 0) send(past);
      if (!run) {
        send([]);
        return () => {};
      }
      const listen = (events: readonly ResponseEvent[]) => send(events);
      run.listeners.add(listen);
      return () => run.listeners.delete(listen);
    };
  }
}

/** An SSE body of `follow`'s events; the client hanging up only stops the copy, never the run. */
export function followStream(follow: Follow): ReadableStream<Uint8Array> {
  let stop = () => {};
  return new ReadableStream<Uint8Array>({
    start(controller) {
      let closed = false;
      stop = follow((events) => {
        if (closed) return;
        if (events.length === 0) {
          closed = true;
          controller.close();
          return;
        }
        for (const e of events) controller.enqueue(namedEvent(e));
      });
    },
    cancel() {
      stop();
    },
  });
}
