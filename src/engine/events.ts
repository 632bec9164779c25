/**
 * Typed channels the engine publishes on: KV events (stored / removed / moved) for the control
 * plane, and a per-request async queue that turns pushed values into an async iterator.
 */
import type { KvEvent } from "../../kv/index.ts";

/** A synchronous publish/subscribe channel of one event type. */
export class EventChannel<T> {
  private readonly subscribers = new Set<(event: T) => void>();

  /** Subscribes; returns the function that unsubscribes. */
  subscribe(fn: (event: T) => void): () => void {
    this.subscribers.add(fn);
    return () => this.subscribers.delete(fn);
  }

  /** Delivers an event to every subscriber; a throwing subscriber does not stop the others. */
  publish(event: T): void {
    for (const fn of this.subscribers) {
      try {
        fn(event);
      } catch {
        // A faulty consumer must not break the engine loop that publishes.
      }
    }
  }

  /** Number of subscribers. */
  get size(): number {
    return this.subscribers.size;
  }
}

/** The engine's KV event channel. */
export type KvEventChannel = EventChannel<KvEvent>;

/**
 * A single-consumer queue: the engine pushes, one reader iterates. Ends on `close()`; a reader
 * that stops early (break / return) runs `onReturn`, which the engine uses to cancel the request.
 */
export class AsyncQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private waiter: ((r: IteratorResult<T>) => void) | undefined;
  private closed = false;
  private readonly observers: ((item: T) => void)[] = [];

  constructor(private readonly onReturn: () => void = () => {}) {}

  /** Calls `fn` with each value pushed from now on, as it is pushed: read or not, even once closed. */
  observePush(fn: (item: T) => void): void {
    this.observers.push(fn);
  }

  /** Adds a value (ignored after close). */
  push(item: T): void {
    for (const fn of this.observers) fn(item);
    if (this.closed) return;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = undefined;
      w({ value: item, done: false });
    } else this.items.push(item);
  }

  /** Ends the stream after the values already queued. */
  close(): void {
    this.closed = true;
    if (this.waiter && this.items.length === 0) {
      const w = this.waiter;
      this.waiter = undefined;
      w({ value: undefined, done: true });
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: (): Promise<IteratorResult<T>> => {
        if (this.items.length > 0) return Promise.resolve({ value: this.items.shift()!, done: false });
        if (this.closed) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => (this.waiter = resolve));
      },
      return: (): Promise<IteratorResult<T>> => {
        if (!this.closed) this.onReturn();
        this.closed = true;
        this.items.length = 0;
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}
