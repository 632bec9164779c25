/**
 * A pool of GPU storage buffers, reused by size class, with byte counters.
 *
 * Size classes: up to 64 KiB the next power of two (at least 256 B); above, the next multiple of an
 * eighth of the enclosing power of two, so a class wastes at most 12.5%. A freed buffer goes back
 * to its class's free list, and a request takes the oldest free buffer of its class (lowest id), so
 * which buffer an op gets depends only on which are free, not on the order they were freed in: each
 * decode step then binds the same buffers as the last, and the recorder's cached bind groups serve
 * it (with a stack, steps permuted their buffers and kept creating bind groups). Buffers are reusable
 * as soon as they are freed, because all later use is recorded later in the same command stream;
 * `lastEpoch` lets the uploader see whether a recycled buffer is still read by unsubmitted work.
 * A pool may have a largest size (the device's buffer and binding limits): a class above it is cut
 * down to it, so a request that fits the device never gets a rounded-up buffer that does not (with a
 * limit such as 2^31 − 1 bytes, a 2 GiB − 1 KiB tensor's class would be 2^31 bytes).
 */
import { BackendShapeError } from "../types.ts";


/** A pooled GPU buffer. */
export interface PooledBuffer {
  readonly buffer: GPUBuffer;
  /** Creation order within its pool. */
  readonly id: number;
  /** Class size in bytes (the buffer's real size). */
  readonly size: number;
  /** Recorder epoch of the last command that referenced it (-1: never). */
  lastEpoch: number;
}

/** Byte counters of a pool. */
export interface PoolStats {
  /** Bytes of all live GPU buffers the pool created (in use + cached free). */
  allocatedBytes: number;
  /** Bytes handed out and not yet released. */
  inUseBytes: number;
  /** Highest inUseBytes seen. */
  peakInUseBytes: number;
  /** Requests served from a free list / by creating a buffer. */
  reuses: number;
  creations: number;
}

/** Rounds a byte count up to its size class. */
export function sizeClass(bytes: number): number {
  const b = Math.max(256, Math.ceil(bytes / 4) * 4);
  if (b <= 65536) return 2 ** Math.ceil(Math.log2(b));
  const step = 2 ** Math.floor(Math.log2(b)) / 8;
  return Math.ceil(b / step) * step;
}

/** Storage buffers by size class. */
export class BufferPool {
  readonly #device: GPUDevice;
  readonly #usage: number;
  readonly #maxBytes: number;
  /** Free buffers by class, each list in descending id order (the lowest id pops first). */
  readonly #free = new Map<number, PooledBuffer[]>();
  #nextId = 0;
  readonly #stats: PoolStats = { allocatedBytes: 0, inUseBytes: 0, peakInUseBytes: 0, reuses: 0, creations: 0 };

  /** `maxBytes`: the largest buffer handed out (rounded down to whole words); larger requests throw. */
  constructor(device: GPUDevice, usage: number, maxBytes = Infinity) {
    this.#device = device;
    this.#usage = usage;
    this.#maxBytes = Math.floor(maxBytes / 4) * 4;
  }

  /** The largest request `acquire` serves. */
  get maxBytes(): number {
    return this.#maxBytes;
  }

  /** A buffer of at least `bytes` bytes (contents undefined when recycled, zero when new). */
  acquire(bytes: number): PooledBuffer {
    if (bytes > this.#maxBytes) {
      throw new BackendShapeError(`A buffer of ${bytes} bytes exceeds the device's limit of ${this.#maxBytes} bytes`);
    }
    const size = Math.min(sizeClass(bytes), this.#maxBytes);
    const list = this.#free.get(size);
    let pb = list?.pop();
    if (pb) {
      this.#stats.reuses++;
    } else {
      pb = { buffer: this.#device.createBuffer({ size, usage: this.#usage }), id: this.#nextId++, size, lastEpoch: -1 };
      this.#stats.creations++;
      this.#stats.allocatedBytes += size;
    }
    this.#stats.inUseBytes += size;
    this.#stats.peakInUseBytes = Math.max(this.#stats.peakInUseBytes, this.#stats.inUseBytes);
    return pb;
  }

  /** Returns a buffer to its class's free list. */
  release(pb: PooledBuffer): void {
    this.#stats.inUseBytes -= pb.size;
    const list = this.#free.get(pb.size);
    if (!list) {
      this.#free.set(pb.size, [pb]);
      return;
    }
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (list[mid].id > pb.id) lo = mid + 1;
      else hi = mid;
    }
    list.splice(lo, 0, pb);
  }

  /** Destroys the cached free buffers (live ones stay with their owners). */
  trim(): void {
    for (const list of this.#free.values()) {
      for (const pb of list) {
        this.#stats.allocatedBytes -= pb.size;
        pb.buffer.destroy();
      }
    }
    this.#free.clear();
  }

  /** Free buffers waiting for reuse (tests poison them). */
  freeBuffers(): PooledBuffer[] {
    return [...this.#free.values()].flat();
  }

  /** A snapshot of the counters. */
  stats(): PoolStats {
    return { ...this.#stats };
  }
}
