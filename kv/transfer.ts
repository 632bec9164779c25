/**
 * Per-request choice between fetching cached KV blocks from where they live and recomputing them:
 * transfer = latency + bytes ÷ link bandwidth (+ the source's queue), recompute = prefill seconds
 * on the target. The cheaper wins; ties go to recompute (it frees the link).
 */

/** Inputs of {@link decideTransfer}. */
export interface TransferQuery {
  blocks: number;
  bytesPerBlock: number;
  linkBandwidthBytesPerS: number;
  linkLatencyS: number;
  /** Seconds of prefill the target would spend recomputing those blocks. */
  recomputeS: number;
  /** Seconds before the source can start sending (busy NIC, host→device staging). */
  sourceDelayS?: number;
  /** Bytes that go with any move besides the blocks (a recurrent model's state after the prefix). */
  extraBytes?: number;
}

/** Outcome with both costs, for logging and tests. */
export interface TransferDecision {
  choice: "transfer" | "recompute";
  transferS: number;
  recomputeS: number;
}

/** Seconds to move `bytes` over a link. */
export function transferSeconds(bytes: number, bandwidthBytesPerS: number, latencyS: number): number {
  return bytes <= 0 ? 0 : latencyS + bytes / bandwidthBytesPerS;
}

/** Decides transfer vs recompute for one request's cached blocks. */
export function decideTransfer(q: TransferQuery): TransferDecision {
  const bytes = q.blocks * q.bytesPerBlock + (q.blocks > 0 ? q.extraBytes ?? 0 : 0);
  const transferS = (q.sourceDelayS ?? 0) + transferSeconds(bytes, q.linkBandwidthBytesPerS, q.linkLatencyS);
  return { choice: transferS < q.recomputeS ? "transfer" : "recompute", transferS, recomputeS: q.recomputeS };
}
