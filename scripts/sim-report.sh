#!/usr/bin/env bash
# Regenerates docs/results/: every scenario at 256 GPUs (Kimi-K2.6-like on GB300) at the loads in
# docs/sim.md, plus the trace replays. Long: run on an idle machine (see docs/sim.md for timings).
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${DUR:-1200}
run() { npx tsx src/cli/sim.ts "$@"; }
for s in coding-256 math-256 computer-use-256 mixed-shift-256; do
  run --scenario "$s" --duration "$DUR" --sweep "${LOADS:-1,2}" --report "docs/results/$s" > "docs/results/$s.txt"
done
run --scenario steady-profiled --duration "$DUR" --sweep 1,2 --report docs/results/steady-profiled > docs/results/steady-profiled.txt
run --trace ../shared/traces/azure2023_code.csv --format azure --load 1 --report docs/results/azure-code > docs/results/azure-code.txt
run --trace ../shared/traces/mooncake_synthetic_trace.jsonl --format mooncake --load 1 --report docs/results/mooncake > docs/results/mooncake.txt
