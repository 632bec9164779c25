#!/usr/bin/env bash
# Reruns the seed check of docs/sim.md ("Seeds"): nine runs of the report (all five baseline variants, ours)
# on seeds 2 and 3, one JSON each in docs/results/seeds/ (seed 1 is the reports' own run). About 25 min on
# 2 cores with JOBS=2. Print the table with: npx tsx scripts/sim-seeds-table.ts
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${DUR:-1200}
OUT=docs/results/seeds
runs=(
  "coding-256 glm-5.2 5" "coding-256 kimi-k2.6 1" "coding-256 kimi-k2.6 3"
  "computer-use-256 kimi-k2.6 1" "computer-use-256 kimi-k2.6 2" "computer-use-256 kimi-k2.6 3"
  "math-256 kimi-k2.6 5" "mixed-shift-256 kimi-k2.6 2" "mixed-shift-256 kimi-k2.6 3"
)
for seed in 2 3; do for r in "${runs[@]}"; do echo "$r $seed"; done; done |
  xargs -P "${JOBS:-2}" -L 1 bash -c '
    s=$0 m=$1 l=$2 seed=$3
    tag=$(echo "$s" | tr -d -); [ "$m" = glm-5.2 ] && tag="${tag}_glm"
    npx tsx src/cli/sim.ts --scenario "$s" --model "$m" --load "$l" --seed "$seed" --duration '"$DUR"' --json > '"$OUT"'/scenario_${tag}_load_${l}_seed_${seed}.json
    echo "done $s $m $l seed $seed"'
