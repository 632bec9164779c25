/**
 * Records ops into one command encoder (one compute pass between copies) and submits on demand.
 * Holds the pipeline cache (keyed by kernel name and template parameters, never by shapes: shapes
 * travel in a uniform block per dispatch), the uniform ring those blocks are written into, and a
 * bind group cache.
 *
 * Why bind groups are cached: WebGPU cannot destroy a bind group; it is freed only when the JS
 * garbage collector finalizes its wrapper, and V8 does not count the native memory behind it. On
 * lavapipe every live bind group holds its own 4 KiB mapping of a memfd (the descriptor set's
 * memory), so one bind group per dispatch grew /proc/self/maps by ~1 line per dispatch between
 * collections (the llama.cpp oracle file: ~1.2k per model run, 19k to 64k, near Linux's 65530
 * vm.max_map_count). The uniform binding takes a dynamic offset, so a bind group depends only on
 * the kernel and the buffers bound, which repeat from one decode step to the next.
 */
import { type BufferPool, type PooledBuffer } from "./buffer-pool.ts";
import { deviceLostError, type GpuDevice, WebGpuError } from "./device.ts";
import { bindGroupLayoutEntries, kernelKey, type KernelName, type KernelParams, specialiseKernel } from "./kernel-source.ts";

/** A 32-bit float uniform field (plain numbers are written as u32). */
export class F32 {
  constructor(readonly value: number) {}
}

/** One uniform field: a u32 (number) or an f32. */
export type UniformField = number | F32;

/** Counters of recorded work. */
export interface RecorderStats {
  dispatches: number;
  submits: number;
  pipelines: number;
  /** Bind groups created (a dispatch over the same kernel and buffers as a cached one reuses it). */
  bindGroups: number;
}

const UNIFORM_CHUNK = 64 * 1024;
const MAX_GROUPS = 65535;
/**
 * Bind groups kept for reuse, least recently used dropped first. Each costs a mapping on lavapipe
 * (see above), so this bounds those; it is well above the dispatches of one decode step of large
 * models (~10-30 per layer), so a step's bind groups survive until the next step reuses them.
 */
const BIND_GROUP_CACHE = 4096;

/** A compiled kernel variant, its explicit group-0 layout, and a small id for bind group keys. */
interface Kernel {
  pipeline: GPUComputePipeline;
  layout: GPUBindGroupLayout;
  id: number;
}

interface UniformChunk {
  buffer: PooledBuffer;
  data: ArrayBuffer;
  used: number;
}

/** Command recording for one device. */
export class Recorder {
  readonly #gpu: GpuDevice;
  readonly #sources: ReadonlyMap<KernelName, string>;
  readonly #uniformPool: BufferPool;
  readonly #kernels = new Map<string, Kernel>();
  /** Bind groups by kernel id and bound buffers, in least-recently-used-first order. */
  readonly #bindGroups = new Map<string, GPUBindGroup>();
  /** Small ids of the buffers bound so far, for bind group keys (weak: buffers come and go). */
  readonly #bufferIds = new WeakMap<GPUBuffer, number>();
  #nextBufferId = 0;
  #encoder: GPUCommandEncoder | undefined;
  #pass: GPUComputePassEncoder | undefined;
  #chunks: UniformChunk[] = [];
  #afterSubmit: (() => void)[] = [];
  #epoch = 0;
  /** Pending validation results of pipeline creations, awaited at the next flush. */
  #checks: Promise<string | false | null>[] = [];
  readonly #stats: RecorderStats = { dispatches: 0, submits: 0, pipelines: 0, bindGroups: 0 };

  constructor(gpu: GpuDevice, sources: ReadonlyMap<KernelName, string>, uniformPool: BufferPool) {
    this.#gpu = gpu;
    this.#sources = sources;
    this.#uniformPool = uniformPool;
  }

  /** Epoch of the commands being recorded now (bumped by every submit). */
  get epoch(): number {
    return this.#epoch;
  }

  /** The device's GPU handle. */
  get device(): GPUDevice {
    return this.#gpu.device;
  }

  /** A pipeline for a kernel variant, compiled once per distinct template parameters. */
  pipeline(name: KernelName, params: KernelParams): GPUComputePipeline {
    return this.#kernel(name, params).pipeline;
  }

  #kernel(name: KernelName, params: KernelParams): Kernel {
    const key = kernelKey(name, params);
    let k = this.#kernels.get(key);
    if (!k) {
      const code = specialiseKernel(this.#sources, name, params);
      this.device.pushErrorScope("validation");
      const layout = this.device.createBindGroupLayout({ entries: bindGroupLayoutEntries(code, key), label: key });
      const module = this.device.createShaderModule({ code, label: key });
      const pipeline = this.device.createComputePipeline({
        layout: this.device.createPipelineLayout({ bindGroupLayouts: [layout], label: key }),
        compute: { module, entryPoint: "main" },
        label: key,
      });
      this.#checks.push(this.device.popErrorScope().then((e) => e && `kernel ${key}: ${e.message}`));
      k = { pipeline, layout, id: this.#kernels.size };
      this.#kernels.set(key, k);
      this.#stats.pipelines++;
    }
    return k;
  }

  #bufferId(buffer: GPUBuffer): number {
    let id = this.#bufferIds.get(buffer);
    if (id === undefined) {
      id = this.#nextBufferId++;
      this.#bufferIds.set(buffer, id);
    }
    return id;
  }

  /** The bind group of `kernel` over these buffers (uniform block at binding 0, `size` bytes), cached. */
  #bindGroup(kernel: Kernel, uniform: GPUBuffer, size: number, bindings: readonly [number, PooledBuffer][]): GPUBindGroup {
    let key = `${kernel.id}|${this.#bufferId(uniform)}:${size}`;
    for (const [binding, pb] of bindings) key += `|${binding}:${this.#bufferId(pb.buffer)}`;
    let bg = this.#bindGroups.get(key);
    if (bg) {
      this.#bindGroups.delete(key); // re-inserted below as the most recently used
    } else {
      const entries: GPUBindGroupEntry[] = [{ binding: 0, resource: { buffer: uniform, offset: 0, size } }];
      for (const [binding, pb] of bindings) entries.push({ binding, resource: { buffer: pb.buffer } });
      bg = this.device.createBindGroup({ layout: kernel.layout, entries });
      this.#stats.bindGroups++;
      if (this.#bindGroups.size >= BIND_GROUP_CACHE) {
        const oldest = this.#bindGroups.keys().next();
        if (!oldest.done) this.#bindGroups.delete(oldest.value);
      }
    }
    this.#bindGroups.set(key, bg);
    return bg;
  }

  /** Drops the cached bind groups (they keep their buffers alive; call when those are destroyed). */
  dropBindGroups(): void {
    this.#bindGroups.clear();
  }

  #encoderNow(): GPUCommandEncoder {
    this.#encoder ??= this.device.createCommandEncoder();
    return this.#encoder;
  }

  #uniformSlot(fields: readonly UniformField[]): { buffer: GPUBuffer; offset: number; size: number } {
    const size = Math.ceil((fields.length * 4) / 16) * 16;
    const stride = Math.ceil(size / this.#gpu.uniformAlign) * this.#gpu.uniformAlign;
    let chunk = this.#chunks[this.#chunks.length - 1];
    if (!chunk || chunk.used + stride > UNIFORM_CHUNK) {
      chunk = { buffer: this.#uniformPool.acquire(UNIFORM_CHUNK), data: new ArrayBuffer(UNIFORM_CHUNK), used: 0 };
      this.#chunks.push(chunk);
    }
    const u32 = new Uint32Array(chunk.data, chunk.used, size / 4);
    const f32 = new Float32Array(chunk.data, chunk.used, size / 4);
    fields.forEach((f, i) => {
      if (f instanceof F32) f32[i] = f.value;
      else u32[i] = f >>> 0;
    });
    const offset = chunk.used;
    chunk.used += stride;
    return { buffer: chunk.buffer.buffer, offset, size };
  }

  /** Records one dispatch of `groups` workgroups (folded into 2-D past 65535; kernels bound-check). */
  dispatch(
    name: KernelName,
    params: KernelParams,
    uniforms: readonly UniformField[],
    bindings: readonly [number, PooledBuffer][],
    groups: number,
  ): void {
    if (groups <= 0) return;
    this.assertLive();
    const kernel = this.#kernel(name, params);
    const slot = this.#uniformSlot(uniforms);
    for (const [, pb] of bindings) pb.lastEpoch = this.#epoch;
    const bindGroup = this.#bindGroup(kernel, slot.buffer, slot.size, bindings);
    this.#pass ??= this.#encoderNow().beginComputePass();
    this.#pass.setPipeline(kernel.pipeline);
    this.#pass.setBindGroup(0, bindGroup, [slot.offset]);
    const x = Math.min(groups, MAX_GROUPS);
    this.#pass.dispatchWorkgroups(x, Math.ceil(groups / x));
    this.#stats.dispatches++;
  }

  /** Records a buffer-to-buffer copy. */
  copy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, bytes: number): void {
    this.assertLive();
    this.#endPass();
    this.#encoderNow().copyBufferToBuffer(src, srcOffset, dst, dstOffset, bytes);
  }

  /** Records a zero fill. */
  clear(pb: PooledBuffer, bytes: number): void {
    this.assertLive();
    this.#endPass();
    pb.lastEpoch = this.#epoch;
    this.#encoderNow().clearBuffer(pb.buffer, 0, Math.ceil(bytes / 4) * 4);
  }

  /** Runs `fn` once the current commands have been submitted (e.g. destroying a staging buffer). */
  afterSubmit(fn: () => void): void {
    this.#afterSubmit.push(fn);
  }

  #endPass(): void {
    this.#pass?.end();
    this.#pass = undefined;
  }

  /**
   * The error of a lost device, or undefined while it lives. The loss is reported asynchronously,
   * so a command that failed a moment after the loss gives it a turn of the event loop to arrive.
   */
  async lostError(): Promise<WebGpuError | undefined> {
    const now = deviceLostError(this.#gpu);
    if (now) return now;
    await new Promise((resolve) => setTimeout(resolve, 0));
    return deviceLostError(this.#gpu);
  }

  /**
   * Throws once the device is known to be lost: commands on a lost device are never run, and some
   * (Dawn's) have crashed the process, so nothing more is handed to it.
   */
  assertLive(): void {
    const lost = deviceLostError(this.#gpu);
    if (lost) throw lost;
  }

  /** Submits everything recorded so far (uniform data is written first, in queue order). */
  submit(): void {
    this.assertLive();
    const err = this.#gpu.takeError();
    if (err) throw new WebGpuError(`WebGPU reported an error: ${err}`);
    if (!this.#encoder) return;
    this.#endPass();
    const queue = this.device.queue;
    for (const c of this.#chunks) queue.writeBuffer(c.buffer.buffer, 0, c.data, 0, c.used);
    queue.submit([this.#encoder.finish()]);
    this.#encoder = undefined;
    // Later writes into these chunks are queued after this submit, so they may be reused at once.
    for (const c of this.#chunks) this.#uniformPool.release(c.buffer);
    this.#chunks = [];
    for (const fn of this.#afterSubmit.splice(0)) fn();
    this.#epoch++;
    this.#stats.submits++;
  }

  /** Submits and waits until the device has finished. */
  async flush(): Promise<void> {
    await this.checkPipelines();
    this.submit();
    await this.device.queue.onSubmittedWorkDone();
    // On a lost device the wait above resolves although nothing ran.
    this.assertLive();
    const err = this.#gpu.takeError();
    if (err) throw new WebGpuError(`WebGPU reported an error: ${err}`);
  }

  /** Throws the first compilation or validation error of a pipeline created since the last check. */
  async checkPipelines(): Promise<void> {
    const results = await Promise.all(this.#checks.splice(0));
    const bad = results.find((r) => r);
    if (bad) throw new WebGpuError(`WebGPU rejected ${bad}`);
  }

  /** A snapshot of the counters. */
  stats(): RecorderStats {
    return { ...this.#stats };
  }
}
