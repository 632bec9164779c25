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
import type { ApiError } from "./errors.ts";
import { namedEvent } from "./event-stream.ts";
import type { ServeContext } from "./openai.ts";
import { failure } from "./respond.ts";
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

/** The background responses of one server: those running, and the event logs of the last finished. */
export class BackgroundRuns {
  readonly #running = new Map<string, Run>();
  readonly #logs = new Map<string, readonly ResponseEvent[]>();

  /** `keptLogs`: how many finished runs' events are kept for resumed streams. */
  constructor(readonly keptLogs = 64) {}

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
        });
        const err: ApiError | undefined = failure([r]);
        let response = responseJson(t, out, r, err);
        if (!err && run.cancelled && r.finishReason === "abort") response = { ...response, status: "cancelled", incomplete_details: null };
        if (!err) settle(ctx, state, t, out, response);
        else if (t.store) state.responses.put({ id: t.id, response, inputItems: t.inputItems, input: t.input, output: [], previousId: t.previousId, sessionId: t.sessionId ?? t.id });
        const final = err ? "response.failed" : response.status === "completed" ? "response.completed" : "response.incomplete";
        run.emit([out.event(final, { response })]);
        return response;
      } finally {
        this.#running.delete(t.id);
        this.#logs.set(t.id, run.events);
        while (this.#logs.size > this.keptLogs) this.#logs.delete(this.#logs.keys().next().value!);
        for (const listen of run.listeners) listen([]);
        run.listeners.clear();
        end();
      }
    })();
    return run.response();
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
   * come; undefined when it neither runs nor has its events kept. `send([])` ends the stream.
   */
  follow(id: string, after: number): Follow | undefined {
    const run = this.#running.get(id);
    const log = run?.events ?? this.#logs.get(id);
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
