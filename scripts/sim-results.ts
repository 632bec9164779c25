/**
 * What the table scripts read from a committed simulator result (`result.json` of a report, or a
 * `--json` output), and how they pick the baseline variant to compare against.
 */
import { bestVariant } from "../src/sim/compare.ts";

/** One system's figures in a result. */
export interface SystemFigures { ttft: { p95: number }; e2e: { mean: number }; goodput: number; completed_fraction: number; variant?: string }

/** A simulator result, as far as the table scripts read it. */
export interface SimResult {
  load: number;
  workload: string;
  model: string;
  assumptions: string[];
  systems: { baseline: SystemFigures; evolving: SystemFigures };
  baseline_variants: Record<string, SystemFigures>;
}

/**
 * The best baseline variant (highest goodput, ties to the lower mean E2E, as `systems.baseline` is
 * chosen) among those `keep` accepts, named in `variant`; null when it accepts none.
 */
export function bestBaselineAmong(r: SimResult, keep: (variant: string, s: SystemFigures) => boolean): SystemFigures | null {
  const rest = Object.fromEntries(Object.entries(r.baseline_variants).filter(([k, v]) => keep(k, v)));
  if (Object.keys(rest).length === 0) return null;
  const k = bestVariant(rest);
  return { ...rest[k], variant: k };
}
