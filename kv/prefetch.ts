/**
 * How much of a tool-waiting session's host-tier KV a prefetch may bring back to the device without
 * displacing anything worth more. The retention policy that ranks evictions also prices the prefetch:
 * the blocks it brings back would rank as their session's at their depth, so they may take free
 * blocks and evictable blocks ranked strictly below that value, never one ranked at or above it.
 * (kv/tiers.ts `prefetchStartTime` says when; this says how much.)
 */
import type { RetentionPolicy } from "./retention.ts";

/**
 * Blocks of session `sessionId` to prefetch, at most `wanted`, continuing a device prefix of
 * `firstDepth` blocks (the first prefetched block sits at that chain depth). `freeBlocks` are
 * uncached free blocks, always usable. Evictable blocks count only where the policy can rank them
 * against the prefetch ({@link RetentionPolicy.blockValue} and {@link RetentionPolicy.evictableBelow}).
 * Fewer blocks make a shallower chain, worth less (recompute cost grows with depth), which may
 * displace less: the count shrinks until it is consistent with its own value.
 */
export function prefetchBlockCount(
  policy: RetentionPolicy, sessionId: string, firstDepth: number, wanted: number, freeBlocks: number, now: number,
): number {
  const free = Math.max(0, freeBlocks);
  if (wanted <= free) return Math.max(0, wanted);
  if (policy.blockValue === undefined || policy.evictableBelow === undefined) return free;
  let n = wanted;
  for (;;) {
    const value = policy.blockValue(sessionId, firstDepth + n - 1, now);
    const room = free + policy.evictableBelow(value, now, n - free);
    if (room >= n) return n;
    if (room <= free) return free;
    n = room;
  }
}
