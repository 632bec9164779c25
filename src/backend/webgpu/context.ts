/**
 * What every op needs: the device, the buffer pools, the recorder, and tensor allocation
 * (with optional NaN poisoning of fresh outputs, so a kernel that skips an element is caught).
 */
import { BufferPool, type PooledBuffer } from "./buffer-pool.ts";
import type { GpuDevice } from "./device.ts";
import { loadKernelSources } from "./kernel-source.ts";
import { Recorder } from "./recorder.ts";
import { GpuTensor, type RowChunk } from "./tensor.ts";
import { BackendShapeError, type DType, numel } from "../types.ts";
import { AttentionIndexChecks, fmt } from "../shape-checks.ts";

/** Bit pattern of a quiet NaN, also an absurd i32, written into fresh outputs when poisoning. */
export const POISON_BITS = 0x7fc00000;

/** Shared state of one WebGPU backend instance. */
export class GpuContext {
  readonly gpu: GpuDevice;
  readonly pool: BufferPool;
  readonly uniformPool: BufferPool;
  readonly recorder: Recorder;
  /** Attention batches whose indices were checked on the host (once per step, not per layer). */
  readonly indexChecks = new AttentionIndexChecks();
  /** Fill every op output with NaN before the op writes it. */
  poison: boolean;
  /** Matmuls of up to this many rows use the GEMV kernel. */
  readonly gemvMaxRows: number;
  /** Split-KV attention aims for about this many workgroups a dispatch (ops-attention.ts `attentionSplits`). */
  readonly attentionSplitGroups: number;

  constructor(gpu: GpuDevice, poison: boolean, gemvMaxRows: number, attentionSplitGroups: number) {
    this.gpu = gpu;
    this.poison = poison;
    this.gemvMaxRows = gemvMaxRows;
    this.attentionSplitGroups = attentionSplitGroups;
    const u = GPUBufferUsage;
    // Every storage buffer is bound whole by some kernel, so none may exceed the binding limit.
    this.pool = new BufferPool(gpu.device, u.STORAGE | u.COPY_SRC | u.COPY_DST, Math.min(gpu.deviceMaxBinding, gpu.maxBuffer));
    this.uniformPool = new BufferPool(gpu.device, u.UNIFORM | u.COPY_DST);
    this.recorder = new Recorder(gpu, loadKernelSources(), this.uniformPool);
  }

  /** Fills a buffer with a 32-bit pattern, in command order. */
  fill(pb: PooledBuffer, words: number, value: number): void {
    this.recorder.dispatch("fill", {}, [words, value, 0, 0], [[1, pb]], Math.ceil(words / 256));
  }

  /**
   * A buffer for a whole tensor of `shape` taking `bytes`. Refuses, naming the limit, a tensor no
   * kernel could bind (WebGPU would fail only at the next submit, and the op's output would be junk).
   */
  storage(shape: readonly number[], bytes: number): PooledBuffer {
    this.recorder.assertLive();
    const max = this.pool.maxBytes;
    if (bytes > max) {
      throw new BackendShapeError(
        `A webgpu tensor ${fmt(shape)} of ${bytes} bytes exceeds the device's largest storage binding of ${max} bytes (maxStorageBufferBindingSize)`,
      );
    }
    return this.pool.acquire(bytes);
  }

  /** A fresh op output of `shape` (f32 or i32), poisoned when poisoning is on. */
  output(shape: readonly number[], dtype: "f32" | "i32" = "f32"): GpuTensor {
    const count = numel(shape);
    const pb = this.storage(shape, count * 4);
    if (this.poison) this.fill(pb, pb.size / 4, POISON_BITS);
    return this.wrap(shape, dtype, [{ buffer: pb, rowStart: 0, rows: 1 }]);
  }

  /** A tensor over existing chunks (with the host copy of an uploaded i32 tensor). */
  wrap(shape: readonly number[], dtype: DType, chunks: RowChunk[], host?: Int32Array): GpuTensor {
    return new GpuTensor([...shape], dtype, { chunks, freed: false, owner: this }, host);
  }

  /** A scratch buffer released after the current commands (in order, so at once). */
  scratch(bytes: number): PooledBuffer {
    return this.pool.acquire(bytes);
  }

  /**
   * Writes host bytes into a buffer in command order. A buffer that no unsubmitted command
   * references is written through the queue directly; otherwise the bytes go through a staging
   * buffer copied inside the command stream, so earlier recorded reads still see the old contents.
   */
  write(pb: PooledBuffer, bytes: Uint8Array): void {
    const padded = bytes.byteLength % 4 === 0 ? bytes : padTo4(bytes);
    if (padded.byteLength === 0) return;
    this.recorder.assertLive();
    if (pb.lastEpoch !== this.recorder.epoch) {
      this.gpu.device.queue.writeBuffer(pb.buffer, 0, padded as Uint8Array<ArrayBuffer>);
      return;
    }
    const staging = this.gpu.device.createBuffer({ size: padded.byteLength, usage: GPUBufferUsage.COPY_SRC, mappedAtCreation: true });
    new Uint8Array(staging.getMappedRange()).set(padded);
    staging.unmap();
    this.recorder.copy(staging, 0, pb.buffer, 0, padded.byteLength);
    this.recorder.afterSubmit(() => staging.destroy());
  }

  /** Frees a tensor's buffers back to the pool. */
  release(t: GpuTensor): void {
    if (t.storage.freed) return;
    t.storage.freed = true;
    for (const c of t.storage.chunks) this.pool.release(c.buffer);
  }
}

function padTo4(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(Math.ceil(bytes.byteLength / 4) * 4);
  out.set(bytes);
  return out;
}
