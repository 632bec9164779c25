/**
 * Acquires a WebGPU device with the adapter's largest buffer limits, and tracks uncaptured errors
 * so a validation failure surfaces as an exception at the next submit instead of silently.
 */
import { getGpu } from "../../runtime/webgpu.ts";
import { BackendUnavailableError } from "../types.ts";

/** A device and what the backend needs to know about it. */
export interface GpuDevice {
  device: GPUDevice;
  /**
   * The GPU entry point and adapter, held for the device's lifetime: on Node, Dawn destroys its
   * instance when the `GPU` object is garbage-collected, and a live device then crashes the process.
   */
  owners: readonly [GPU, GPUAdapter];
  /** Human-readable adapter description. */
  description: string;
  /** Whether shader-f16 is enabled on the device. */
  f16: boolean;
  /** Largest storage binding in bytes (bigger weights are split into row chunks). */
  maxBinding: number;
  /** Largest buffer in bytes. */
  maxBuffer: number;
  /**
   * The device's own largest storage binding in bytes (`maxBinding` may be set lower): an
   * activation, a cache or an op's output is bound whole, so none may be larger.
   */
  deviceMaxBinding: number;
  /** True for a CPU implementation (llvmpipe, SwiftShader): kernel choices differ there. */
  software: boolean;
  /** Uniform offset alignment in bytes. */
  uniformAlign: number;
  /** Returns and clears the first uncaptured error message since the last call. */
  takeError(): string | undefined;
  /** Why the device was lost ("destroyed: …", "unknown: …"), or undefined while it lives. */
  lostReason(): string | undefined;
}

/** Thrown when the device reports a validation or out-of-memory error, or is lost or destroyed. */
export class WebGpuError extends Error {
  override name = "WebGpuError";
}

/** The error to throw when `gpu`'s device is lost, or undefined while it lives. */
export function deviceLostError(gpu: GpuDevice): WebGpuError | undefined {
  const reason = gpu.lostReason();
  return reason === undefined ? undefined : new WebGpuError(`The WebGPU device was lost (${reason}); its tensors are gone, create a new backend`);
}

/** Options for device creation. */
export interface DeviceOptions {
  /** Use shader-f16 when the adapter has it (default true); false forces the u32-unpack path. */
  useF16?: boolean;
  /** Caps the storage binding size used for chunking weights (tests exercise chunking with it). */
  maxBindingBytes?: number;
}

/** Requests an adapter and device; throws BackendUnavailableError when there is none. */
export async function acquireDevice(options: DeviceOptions = {}): Promise<GpuDevice> {
  const gpu = await getGpu();
  if (!gpu) throw new BackendUnavailableError("WebGPU is not available in this runtime");
  const adapter = await gpu.requestAdapter({ powerPreference: "high-performance" });
  if (!adapter) throw new BackendUnavailableError("WebGPU found no adapter (is a Vulkan driver such as Mesa lavapipe installed?)");
  const f16 = (options.useF16 ?? true) && adapter.features.has("shader-f16");
  const lim = adapter.limits;
  const device = await adapter.requestDevice({
    requiredFeatures: f16 ? ["shader-f16"] : [],
    requiredLimits: {
      maxStorageBufferBindingSize: lim.maxStorageBufferBindingSize,
      maxBufferSize: lim.maxBufferSize,
      maxStorageBuffersPerShaderStage: Math.min(lim.maxStorageBuffersPerShaderStage, 10),
      maxComputeWorkgroupStorageSize: lim.maxComputeWorkgroupStorageSize,
    },
  });
  let firstError: string | undefined;
  device.addEventListener("uncapturederror", (ev: Event) => {
    const msg = (ev as GPUUncapturedErrorEvent).error?.message ?? String(ev);
    firstError ??= msg.split("\n")[0];
  });
  let lost: string | undefined;
  // A lost device (driver reset, out of memory, destroy()) fails every later command vaguely or
  // not at all (a flush resolves as if the work ran): the reason is kept for a clear error.
  device.lost.then((l) => {
    lost = `${l.reason ?? "unknown"}${l.message ? `: ${l.message}` : ""}`;
  });
  const info = (adapter as GPUAdapter & { info?: GPUAdapterInfo }).info;
  const description = [info?.description, info?.vendor, info?.architecture].filter((s) => s).join(" / ") || "WebGPU adapter";
  const software = /llvmpipe|lavapipe|swiftshader|software/i.test(`${description} ${info?.architecture ?? ""}`);
  return {
    device,
    owners: [gpu, adapter],
    description,
    software,
    f16,
    maxBinding: Math.min(device.limits.maxStorageBufferBindingSize, options.maxBindingBytes ?? Infinity),
    maxBuffer: device.limits.maxBufferSize,
    deviceMaxBinding: device.limits.maxStorageBufferBindingSize,
    uniformAlign: Math.max(device.limits.minUniformBufferOffsetAlignment, 16),
    takeError() {
      const e = firstError;
      firstError = undefined;
      return e;
    },
    lostReason: () => lost,
  };
}
