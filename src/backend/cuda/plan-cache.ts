/**
 * Keeps the device copy of the latest attention plan. Every layer of a forward step passes the
 * same batch tensors, so the plan is made and uploaded once per step, not once per layer.
 */
import type { Tensor } from "../types.ts";
import { planAttention } from "./attention-plan.ts";
import type { DevicePtr, NativeContext } from "./native-types.ts";
import type { CudaTensor } from "./tensor.ts";

/** A plan on the device: decode row indices and flash tiles (0n when empty). */
export interface DevicePlan {
  rows: DevicePtr;
  rowCount: number;
  tiles: DevicePtr;
  tileCount: number;
}

/** One cached plan per backend, keyed by the tokenSeq tensor it was made from. */
export class PlanCache {
  private key: Tensor | undefined;
  private plan: DevicePlan | undefined;

  constructor(private readonly ctx: NativeContext) {}

  /** The plan for `seq` (n rows), made and uploaded on first use. */
  get(seq: CudaTensor, n: number): DevicePlan {
    if (this.plan && this.key === seq) return this.plan;
    this.clear();
    const p = seq.host
      ? planAttention(seq.host)
      : { decodeRows: Int32Array.from({ length: n }, (_, i) => i), tiles: new Int32Array(0) };
    this.key = seq;
    this.plan = {
      rows: this.upload(p.decodeRows),
      rowCount: p.decodeRows.length,
      tiles: this.upload(p.tiles),
      tileCount: p.tiles.length / 2,
    };
    return this.plan;
  }

  /** Frees the cached plan's device buffers (stream-ordered, so pending kernels still see them). */
  clear(): void {
    if (this.plan?.rows) this.ctx.free(this.plan.rows);
    if (this.plan?.tiles) this.ctx.free(this.plan.tiles);
    this.plan = undefined;
    this.key = undefined;
  }

  private upload(a: Int32Array): DevicePtr {
    if (a.length === 0) return 0n;
    const p = this.ctx.alloc(a.length * 4);
    this.ctx.upload(p, a);
    return p;
  }
}
