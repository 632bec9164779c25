/**
 * Hardware and model profiles. Every number is an assumption written next to its source; change
 * them here, not in the cost model. "Achieved" efficiencies turn peaks into what a tuned engine gets.
 */

/** One GPU type. */
export interface HardwareProfile {
  name: string;
  /** HBM per GPU (bytes) and its bandwidth (bytes/s). */
  hbmBytes: number;
  hbmBandwidth: number;
  /** Dense peak FLOP/s per GPU for the precision the model runs in (fp8 here). */
  peakFlops: number;
  /** Scale-up link per GPU within a rack / NVLink domain (bytes/s), and across racks (bytes/s). */
  intraRackBandwidth: number;
  interRackBandwidth: number;
  intraRackLatencyS: number;
  interRackLatencyS: number;
  /** GPUs per rack (NVLink domain). */
  gpusPerRack: number;
  /** Device↔host-memory bandwidth per GPU (bytes/s) and host memory per GPU usable for KV (bytes). */
  hostBandwidth: number;
  hostBytes: number;
  /** Achieved fractions of peak compute (prefill) and bandwidth (decode), and fixed per-step overhead (s). */
  flopEfficiency: number;
  bandwidthEfficiency: number;
  stepOverheadS: number;
  /**
   * Extra seconds for a step that carries both prefill and decode (default 0). Real engines replay
   * decode-only steps from CUDA graphs but run mixed batches eagerly, and a prefill chunk does not
   * overlap a decode batch's memory traffic perfectly; the roofline alone sees neither. Fitted by
   * calibration from a step log that has both kinds of step.
   */
  mixedStepOverheadS?: number;
}

/** One model. */
export interface ModelProfile {
  name: string;
  totalParams: number;
  activeParams: number;
  layers: number;
  /** Bytes per parameter of the served weights (fp8 = 1). */
  weightBytesPerParam: number;
  /** Parameters outside routed experts (attention, shared expert, embeddings). */
  denseParams: number;
  experts: number;
  expertsPerToken: number;
  /** KV bytes per token over all layers. */
  kvBytesPerToken: number;
  /** Attention FLOPs per (new token × context token) over all layers. */
  attnFlopsPerTokenPair: number;
  /** Fraction of context attended per token (1 = dense; <1 for sparse attention such as DSA). */
  attnDensity: number;
  maxContext: number;
}

const GB = 1e9;
const TB = 1e12;

/**
 * GB300 (Blackwell Ultra) in an NVL72 rack. Assumptions: 288 GB HBM3e at ≈8 TB/s; dense fp8 ≈5 PFLOP/s
 * (bf16 ≈2.5); NVLink 5 ≈1.8 TB/s per GPU (900 GB/s each way: we use one direction); across racks one
 * 800 Gb/s ConnectX-8 NIC per GPU ≈100 GB/s; Grace host memory over NVLink-C2C (≈900 GB/s per
 * superchip shared by 2 GPUs → ≈450 GB/s, ≈240 GB LPDDR5X per GPU usable for KV).
 * Efficiencies: 45% of peak FLOP/s in large prefill, 70% of HBM bandwidth in decode; 3 ms per step for
 * scheduling, MoE all-to-all and launch overhead (assumed; calibrate from measured step times).
 */
export const GB300: HardwareProfile = {
  name: "gb300", hbmBytes: 288 * GB, hbmBandwidth: 8 * TB, peakFlops: 5e15,
  intraRackBandwidth: 900 * GB, interRackBandwidth: 100 * GB, intraRackLatencyS: 5e-6, interRackLatencyS: 2e-5,
  gpusPerRack: 72, hostBandwidth: 450 * GB, hostBytes: 240 * GB,
  flopEfficiency: 0.45, bandwidthEfficiency: 0.7, stepOverheadS: 0.003,
};

/**
 * H200 SXM in 8-GPU HGX nodes. Assumptions: 141 GB HBM3e at 4.8 TB/s; dense fp8 ≈1.98 PFLOP/s (bf16 ≈990
 * TFLOP/s); NVLink 4 900 GB/s per GPU (450 each way); 400 Gb/s NIC per GPU ≈50 GB/s across nodes; PCIe 5
 * x16 ≈55 GB/s to host, ≈250 GB host memory per GPU for KV. Same efficiencies; 4 ms per-step overhead.
 */
export const H200: HardwareProfile = {
  name: "h200", hbmBytes: 141 * GB, hbmBandwidth: 4.8 * TB, peakFlops: 1.98e15,
  intraRackBandwidth: 450 * GB, interRackBandwidth: 50 * GB, intraRackLatencyS: 5e-6, interRackLatencyS: 2e-5,
  gpusPerRack: 8, hostBandwidth: 55 * GB, hostBytes: 250 * GB,
  flopEfficiency: 0.45, bandwidthEfficiency: 0.7, stepOverheadS: 0.004,
};

/**
 * Kimi-K2.6-like: Kimi K2 architecture (public): ≈1.04T total, 32B active, 61 layers, 384 routed experts
 * top-8 + 1 shared, MLA with a 512 latent + 64 rope = 576 values per token per layer, 64 heads.
 * Served in fp8 (weights and KV: 576 B × 61 ≈ 35 KB per token). Attention FLOPs per token pair with
 * absorbed MLA ≈ 2·layers·heads·(576 + 512). Dense (non-expert) params ≈ 12B (assumed).
 */
export const KIMI_K2_6: ModelProfile = {
  name: "kimi-k2.6", totalParams: 1.04e12, activeParams: 32e9, layers: 61, weightBytesPerParam: 1,
  denseParams: 12e9, experts: 384, expertsPerToken: 8, kvBytesPerToken: 576 * 61,
  attnFlopsPerTokenPair: 2 * 61 * 64 * (576 + 512), attnDensity: 1, maxContext: 262144,
};

/**
 * GLM-5.2-like. Assumptions (GLM-5 class, not verified against a model card): ≈745B total, ≈40B active,
 * 78 layers, 256 routed experts top-8, MLA-style 576-wide latent KV, and DeepSeek-style sparse
 * attention so each token attends ≈2048 selected tokens at long context (attnDensity applied to
 * contexts past 2048 in the cost model as a fraction ≈ 0.25 for the ≈8k typical context).
 */
export const GLM_5_2: ModelProfile = {
  name: "glm-5.2", totalParams: 745e9, activeParams: 40e9, layers: 78, weightBytesPerParam: 1,
  denseParams: 14e9, experts: 256, expertsPerToken: 8, kvBytesPerToken: 576 * 78,
  attnFlopsPerTokenPair: 2 * 78 * 64 * (576 + 512), attnDensity: 0.25, maxContext: 202752,
};

/**
 * stories260K (the bundled tiny Llama, `models/stories260K.gguf`): 5 layers, width 64, 8 query and 4
 * KV heads of 8, FFN 172, vocabulary 512, untied output; f32 weights and KV as the reference backend
 * keeps them (KV 2 × 5 × 4 × 8 × 4 B = 1280 B per token). Matmul parameters per token ≈ 259k (layers
 * 226.6k + output 32.8k); the input embedding is a lookup. Used to check the simulator against the real
 * server (`scripts/sim-validate.ts`), not by the CLI's scenarios, whose contexts it cannot hold.
 */
export const STORIES_260K: ModelProfile = {
  name: "stories260K", totalParams: 259_328, activeParams: 259_328, layers: 5, weightBytesPerParam: 4,
  denseParams: 259_328, experts: 1, expertsPerToken: 1, kvBytesPerToken: 1280,
  attnFlopsPerTokenPair: 2 * 5 * 8 * (8 + 8), attnDensity: 1, maxContext: 2048,
};

/**
 * A worker of the real server on this machine's CPU cores (reference backend, one worker thread).
 * Peaks are nominal (100 GFLOP/s, 100 GB/s) so a calibration from a step log sets the achieved
 * fractions below 1; the link is a structured clone between threads (≈1 GB/s assumed); no host tier;
 * memory sized so the KV pool is `--kv-blocks 8192` of 16 tokens. Meant to be calibrated, not used as is.
 */
export const CPU_REFERENCE: HardwareProfile = {
  name: "cpu-reference", hbmBytes: Math.ceil((8192 * 16 * 1280 + 259_328 * 4) / 0.9), hbmBandwidth: 100 * GB, peakFlops: 100e9,
  intraRackBandwidth: 1 * GB, interRackBandwidth: 1 * GB, intraRackLatencyS: 2e-4, interRackLatencyS: 2e-4,
  gpusPerRack: 64, hostBandwidth: 1 * GB, hostBytes: 0,
  flopEfficiency: 0.02, bandwidthEfficiency: 0.05, stepOverheadS: 0.002,
};

/** Profiles by name, for the CLI. */
export const HARDWARE: Record<string, HardwareProfile> = { gb300: GB300, h200: H200 };
export const MODELS: Record<string, ModelProfile> = { "kimi-k2.6": KIMI_K2_6, "glm-5.2": GLM_5_2 };

/** GPUs per worker: the smallest power of two whose HBM holds the weights in at most half of it. */
export function gpusPerWorker(m: ModelProfile, h: HardwareProfile): number {
  const weights = m.totalParams * m.weightBytesPerParam;
  let g = 1;
  while (weights > 0.5 * g * h.hbmBytes) g *= 2;
  return g;
}
