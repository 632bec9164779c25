#!/usr/bin/env bash
# The whole test suite: type check and lint, then every test under Deno and under Node.
# Called by `npm test` (the README's test command) and so by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== CUDA build (nvcc when present)"
CUDA_JOBS="${CUDA_JOBS:-2}" bash scripts/build-cuda.sh
echo "== type check (tsc)"
npx tsc -p .
echo "== lint (deno lint)"
./node_modules/.bin/deno lint src kv planner scripts tests
# The test model loads in milliseconds: a worker silent for minutes is stuck, and should fail its test
# rather than hold the run for the default ten minutes of silence (worker-start.ts).
export EVOLVING_WORKER_START_TIMEOUT_S="${EVOLVING_WORKER_START_TIMEOUT_S:-180}"
mapfile -t files < <(find tests -name '*.test.ts' | sort)
echo "== Deno ($(npx deno --version | head -1))"
# Deno has aborted a few times with a glibc heap-corruption message ("corrupted size vs. prev_size",
# "double free") *after* printing a passing summary, while the process tears down, with exit 134 and
# once with exit 1 (see docs/modules.md "Known issues"; a likely cause, lavapipe passing Linux's
# 65530 memory mappings, is now raised by setup.sh, so this tolerance may be no longer needed). A test failure still
# fails here; only such an exit after "0 failed" (exit 134, or a glibc heap message) is tolerated.
# The files run in DENO_SHARDS processes at once (default 2, one per core; files dealt round-robin in
# sorted order): many tests mostly wait (lavapipe, servers, workers), so two overlap, as Node's
# --test-concurrency=2 does (6m16s one after another against 3m24s in two, on this 2-core machine).
# Separate processes, not `deno test --parallel`: that ran files as workers of one process, where two
# worker-thread tests hung (0644a9c). Each shard's log is printed whole once it ends.
shards="${DENO_SHARDS:-2}"
dir=$(mktemp -d)
pids=()
for ((k = 0; k < shards; k++)); do
  part=()
  for ((i = k; i < ${#files[@]}; i += shards)); do part+=("${files[$i]}"); done
  ( set +e; ./node_modules/.bin/deno test -A --no-check "${part[@]}" > "$dir/$k.log" 2>&1; echo $? > "$dir/$k.rc" ) &
  pids+=($!)
done
wait "${pids[@]}"
failed=0
for ((k = 0; k < shards; k++)); do
  echo "-- Deno shard $((k + 1)) of $shards"
  cat "$dir/$k.log"
  rc=$(cat "$dir/$k.rc")
  log="$dir/$k.log"
  if [ "$rc" -ne 0 ]; then
    if { [ "$rc" -eq 134 ] || grep -Eq 'corrupted size|double free|malloc\(\)|malloc_consolidate|free\(\): ' "$log"; } \
      && grep -Eq '\| [0-9]+ passed \| 0 failed' "$log" && ! grep -Eq 'FAILED|[1-9][0-9]* failed' "$log"; then
      echo "WARNING: Deno shard $((k + 1)) aborted (exit $rc) at teardown after every test passed; known issue, not a test failure"
    else
      echo "Deno shard $((k + 1)) of $shards failed (exit $rc)"
      failed=$rc
    fi
  fi
done
rm -rf "$dir"
if [ "$failed" -ne 0 ]; then exit "$failed"; fi
echo "== Node ($(node --version))"
# A file whose process dies by a signal mid-run (a native crash: Dawn's WebGPU on lavapipe crashed in
# webgpu-hunt2 until each backend stopped making its own Dawn instance; docs/modules.md "Known issues")
# is run once more alone; it must pass then. Any failing test, or a second crash, still fails here.
# A file that stops answering (Dawn deadlocked once) fails after 15 minutes instead of holding the run.
log=$(mktemp)
set +e
node --import tsx --test --test-concurrency=2 --test-timeout=900000 "${files[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  if crashed=$(node scripts/node-crashed-files.mjs "$log"); then
    rm -f "$log"
    mapfile -t again <<< "$crashed"
    echo "WARNING: a Node test process died by a signal (${again[*]}); running it once more alone"
    node --import tsx --test "${again[@]}"
  else
    rm -f "$log"; exit "$rc"
  fi
fi
rm -f "$log"
