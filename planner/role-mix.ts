/**
 * Role mixes for the online planner: how many workers prefill, decode, or do both (mixed), what
 * moving between two mixes costs, and which workers to flip to get there.
 */
import type { PlannerAction, Role, WorkerSnapshot } from "./types.ts";

/** Worker counts per role. */
export interface RoleMix {
  prefill: number;
  decode: number;
  mixed: number;
}

const ROLES: readonly Role[] = ["prefill", "mixed", "decode"];

/** Counts the roles of `workers`. */
export function countRoles(workers: readonly WorkerSnapshot[]): RoleMix {
  const m: RoleMix = { prefill: 0, decode: 0, mixed: 0 };
  for (const w of workers) m[w.role]++;
  return m;
}

/** Every mix of `n` workers that keeps at least one worker able to decode. */
export function allMixes(n: number): RoleMix[] {
  const out: RoleMix[] = [];
  for (let p = 0; p < n; p++) for (let m = 0; m <= n - p; m++) out.push({ prefill: p, mixed: m, decode: n - p - m });
  return out;
}

/**
 * Flips needed to go from `a` to `b`: into prefill (a decode batch must drain first), out of
 * prefill (its queue finishes while new prompts go elsewhere), and decode↔mixed, which only
 * changes what the worker admits next.
 */
export function flipsBetween(a: RoleMix, b: RoleMix): { intoPrefill: number; outOfPrefill: number; other: number } {
  const total = ROLES.reduce((s, r) => s + Math.max(0, b[r] - a[r]), 0);
  const intoPrefill = Math.max(0, b.prefill - a.prefill);
  const outOfPrefill = Math.max(0, a.prefill - b.prefill);
  return { intoPrefill, outOfPrefill, other: total - intoPrefill - outOfPrefill };
}

/** Stable key of a mix's direction from `from`, so a pending move is confirmed only if it keeps its direction. */
export function moveDirection(from: RoleMix, to: RoleMix): string {
  return ROLES.map((r) => Math.sign(to[r] - from[r])).join(",");
}

/**
 * Flips at most `budget` eligible workers from roles in surplus to roles in deficit. Cheapest
 * first: into prefill, the worker with the fewest decodes; out of prefill, the least queued prefill.
 */
export function chooseFlips(
  live: readonly WorkerSnapshot[], target: RoleMix, budget: number, eligible: (w: WorkerSnapshot) => boolean,
): PlannerAction[] {
  const cur = countRoles(live);
  const out: PlannerAction[] = [];
  const used = new Set<string>();
  // Prefill first: it is the move that relieves TTFT, the urgent direction after a burst.
  for (const to of ROLES) {
    for (const from of ROLES) {
      if (from === to) continue;
      const k = Math.min(target[to] - cur[to], cur[from] - target[from], budget - out.length);
      if (k <= 0) continue;
      const pool = live
        .filter((w) => w.role === from && !used.has(w.id) && eligible(w))
        .sort((x, y) => cheaper(to, x, y) || (x.id < y.id ? -1 : 1))
        .slice(0, k);
      for (const w of pool) {
        used.add(w.id);
        cur[from]--;
        cur[to]++;
        out.push({ kind: "flip", workerId: w.id, to });
      }
    }
  }
  return out;
}

function cheaper(to: Role, a: WorkerSnapshot, b: WorkerSnapshot): number {
  return to === "prefill" ? a.decodeBatch - b.decodeBatch : a.waitingPrefillTokens - b.waitingPrefillTokens;
}
