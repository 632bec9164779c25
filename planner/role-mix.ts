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
 * Where several roles lack workers, each flip goes to the one with the smallest share of its target
 * filled (into prefill first on a tie, unless no worker decodes yet), so a move that takes several
 * ticks passes through mixes shaped like its target; and no flip leaves a prefill worker with no
 * decode worker to send it prompts (mixed workers prefill their own). Filling prefill first passed
 * through mixes the planner itself never picks: from all-mixed towards 17 prefill, 9 decode and 6
 * mixed workers two flips a tick made 2, 4, then 6 prefill workers with no decode worker, idle while
 * the pool that served them shrank (simulated coding-256, GLM-5.2-like, load 5: the backlog grew
 * from 0.4 to 11 million tokens in 15 s and the planner went back).
 */
export function chooseFlips(
  live: readonly WorkerSnapshot[], target: RoleMix, budget: number, eligible: (w: WorkerSnapshot) => boolean,
): PlannerAction[] {
  const cur = countRoles(live);
  const out: PlannerAction[] = [];
  const used = new Set<string>();
  const blocked = new Set<Role>(); // roles in deficit with no eligible worker left to take
  const filled = (r: Role) => cur[r] / target[r]; // a role in deficit has a target above 0
  while (out.length < budget) {
    let to: Role | null = null;
    for (const r of ROLES) {
      if (cur[r] >= target[r] || blocked.has(r)) continue;
      if (to === null || filled(r) < filled(to) || (filled(r) === filled(to) && r === "decode" && cur.decode === 0)) to = r;
    }
    if (to === null) break;
    let pick: WorkerSnapshot | null = null;
    for (const from of ROLES) {
      if (from === to || cur[from] <= target[from]) continue;
      // Never strand prefill workers: the last decode worker stays while any worker prefills.
      if (from === "decode" && cur.decode === 1 && cur.prefill + (to === "prefill" ? 1 : 0) > 0) continue;
      if (to === "prefill" && cur.decode === 0) continue;
      for (const w of live) {
        if (w.role !== from || used.has(w.id) || !eligible(w)) continue;
        if (pick === null || cheaper(to, w, pick) < 0 || (cheaper(to, w, pick) === 0 && w.id < pick.id)) pick = w;
      }
      if (pick !== null) break;
    }
    if (pick === null) { blocked.add(to); continue; }
    used.add(pick.id);
    cur[pick.role]--;
    cur[to]++;
    out.push({ kind: "flip", workerId: pick.id, to });
  }
  return out;
}

function cheaper(to: Role, a: WorkerSnapshot, b: WorkerSnapshot): number {
  return to === "prefill" ? a.decodeBatch - b.decodeBatch : a.waitingPrefillTokens - b.waitingPrefillTokens;
}
