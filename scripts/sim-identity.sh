#!/usr/bin/env bash
# Behaviour check for simulator speed work: runs five CLI comparisons (all systems) plus a
# per-request fingerprint, strips only wall-time fields, and diffs against a reference folder.
#   scripts/sim-identity.sh record [DIR]   # on the base commit: writes the reference (default /tmp/sim-identity-ref)
#   scripts/sim-identity.sh check  [DIR]   # after a change: exits 1 and prints the diff if anything moved
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-check}
ref=${2:-/tmp/sim-identity-ref}
out=$([ "$mode" = record ] && echo "$ref" || mktemp -d)
mkdir -p "$out"
strip() { jq 'del(.perf[]?.wall_s, .perf[]?.events_per_s)'; }
sim() { local name=$1; shift; npx tsx src/cli/sim.ts "$@" --json | strip > "$out/$name.json"; }
sim coding --scenario coding-256 --duration 300
sim computer-use --scenario computer-use-256 --duration 300 --load 0.5
sim mixed-shift --scenario mixed-shift-256 --duration 300
sim math --scenario math-256 --duration 200
sim mooncake --trace ../shared/traces/mooncake_synthetic_trace.jsonl --format mooncake
# The report folder adds the time series (SVG plots) that --json leaves out.
rm -rf "$out/report" && npx tsx src/cli/sim.ts --scenario coding-256 --duration 300 --report "$out/report" > /dev/null
jq 'del(.perf[]?.wall_s, .perf[]?.events_per_s)' "$out/report/result.json" > "$out/report/result.stripped.json" && rm "$out/report/result.json"
sed -i -e '/^Wall time:/d' -e '/^deno task sim/d' "$out/report/README.md"
npx tsx scripts/bench-sim.ts --duration 600 --fingerprint --systems evolving,dynamo-disagg-sla,dynamo-disagg-load,dynamo-agg \
  | grep -E 'fingerprint|events' | sed -E 's/wall .*//' > "$out/fingerprints.txt"
if [ "$mode" = record ]; then echo "reference written to $ref"; exit 0; fi
if diff -r "$ref" "$out"; then echo "IDENTICAL to $ref"; rm -rf "$out"; else echo "DIFFERENT (new outputs in $out)"; exit 1; fi
