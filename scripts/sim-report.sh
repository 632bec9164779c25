#!/usr/bin/env bash
# Regenerates docs/results/: every scenario at 256 GPUs (Kimi-K2.6-like on GB300 unless noted) at the
# loads in docs/sim.md, plus the trace replays, each with the no-planner ablation of ours. Long (about
# 45 min on 2 cores): JOBS runs in parallel.
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${DUR:-1200}
R=docs/results
A="--duration $DUR --ablation"
jobs=(
  "--scenario mixed-shift-256 $A --sweep 1,2,3 --report $R/mixed-shift-256"
  "--scenario computer-use-256 $A --sweep 1,2,3 --report $R/computer-use-256"
  "--scenario coding-256 $A --sweep 1,2,3 --report $R/coding-256"
  "--scenario coding-256 $A --sweep 1,2,3,5 --model glm-5.2 --report $R/coding-256-glm"
  "--scenario math-256 $A --sweep 1,2,3,5 --report $R/math-256"
  "--scenario computer-use-256 $A --sweep 0.25,0.5 --report $R/computer-use-256-low"
  "--scenario steady-profiled $A --sweep 1,2 --report $R/steady-profiled"
  "--trace ../shared/traces/azure2023_code.csv --format azure --load 1 --ablation --report $R/azure-code"
  "--trace ../shared/traces/mooncake_synthetic_trace.jsonl --format mooncake --load 1 --ablation --report $R/mooncake"
  # Sensitivity: tensor-parallel attention replicates the MLA KV on every GPU (KV pressure appears).
  "--scenario coding-256 $A --kv-replicated --sweep 1,2 --report $R/kv-replicated-coding-256"
  "--scenario computer-use-256 $A --kv-replicated --sweep 0.5,1 --report $R/kv-replicated-computer-use-256"
  "--scenario mixed-shift-256 $A --kv-replicated --sweep 1,2 --report $R/kv-replicated-mixed-shift-256"
  # Sensitivity: mixed prefill+decode steps cost more than the roofline (no CUDA graphs, interference).
  "--scenario coding-256 $A --mixed-step-overhead-ms 30 --sweep 1,3 --report $R/mixed-overhead-30ms-coding-256"
  "--scenario coding-256 $A --mixed-step-overhead-ms 100 --sweep 1,3 --report $R/mixed-overhead-100ms-coding-256"
  "--scenario computer-use-256 $A --mixed-step-overhead-ms 100 --sweep 1,2 --report $R/mixed-overhead-100ms-computer-use-256"
  "--scenario mixed-shift-256 $A --mixed-step-overhead-ms 100 --sweep 1,2 --report $R/mixed-overhead-100ms-mixed-shift-256"
)
[ -n "${ONLY:-}" ] && mapfile -t jobs < <(printf '%s\n' "${jobs[@]}" | grep -- "$ONLY")
for j in "${jobs[@]}"; do echo "$j"; done | xargs -P "${JOBS:-2}" -I{} bash -c 'a="{}"; out="${a##*--report }"; npx tsx src/cli/sim.ts $a > "$out.txt" && echo "done $out"'
