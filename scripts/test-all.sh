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
# 65530 memory mappings, is now raised by setup.sh; it still happened at 8d3d75e). A test failure still
# fails here; only such an exit after "0 failed" (exit 134, or a glibc heap message) is tolerated, and a
# group that dies so before its summary runs once more (deno_verdict below).
# The files run in groups (DENO_GROUP files each, default 8; each group every n-th file of the sorted
# list, so heavy directories spread over the groups), one `deno test` process a group, DENO_SHARDS
# groups at once (default 2, one per core): each of those slots takes the next group no other has taken
# (a mkdir), so they end together. Many tests mostly wait (lavapipe, servers, workers), so two overlap, as
# Node's shards do. Dealing the files to two fixed processes left one 4 minutes behind the other (6m58s
# and 11m15s at aaf95ff). Separate processes, not `deno test --parallel`: that ran files as workers of
# one process, where two worker-thread tests hung (0644a9c). Each group's log is printed once all end.
shards="${DENO_SHARDS:-2}"
group="${DENO_GROUP:-8}"
dir=$(mktemp -d)
groups=$(( (${#files[@]} + group - 1) / group ))
mkdir "$dir/claims"
deno_slot() {
  for ((g = 0; g < groups; g++)); do
    mkdir "$dir/claims/$g" 2>/dev/null || continue
    part=()
    for ((i = g; i < ${#files[@]}; i += groups)); do part+=("${files[$i]}"); done
    ( set +e; ./node_modules/.bin/deno test -A --no-check "${part[@]}" > "$dir/$g.log" 2>&1; echo $? > "$dir/$g.rc" )
  done
}
pids=()
for ((k = 0; k < shards; k++)); do
  deno_slot &
  pids+=($!)
done
wait "${pids[@]}"
# A group's verdict from its log and exit: ok, teardown (the abort above), crash (the process died by a
# signal or a glibc heap message before its summary, no test having failed) or fail.
deno_verdict() {
  local log="$1" rc="$2"
  [ "$rc" -eq 0 ] && { echo ok; return; }
  grep -Eq 'FAILED|[1-9][0-9]* failed' "$log" && { echo fail; return; }
  if [ "$rc" -gt 128 ] || grep -Eq 'corrupted size|double free|malloc\(\)|malloc_consolidate|free\(\): ' "$log"; then
    if grep -Eq '\| [0-9]+ passed \| 0 failed' "$log" && { [ "$rc" -eq 134 ] || grep -Eq 'corrupted size|double free|malloc\(\)|malloc_consolidate|free\(\): ' "$log"; }; then echo teardown; else echo crash; fi
    return
  fi
  echo fail
}
failed=0
for ((g = 0; g < groups; g++)); do
  echo "-- Deno group $((g + 1)) of $groups"
  cat "$dir/$g.log"
  rc=$(cat "$dir/$g.rc")
  log="$dir/$g.log"
  verdict=$(deno_verdict "$log" "$rc")
  if [ "$verdict" = crash ]; then
    # The same runtime crash can come before the summary, mid-file (stop 84's CI failed so, its cause
    # unlogged): the group runs once more, alone; a failing test or a second crash there fails here.
    echo "WARNING: Deno group $((g + 1)) died (exit $rc) with no test failed; running it once more"
    part=()
    for ((i = g; i < ${#files[@]}; i += groups)); do part+=("${files[$i]}"); done
    set +e
    ./node_modules/.bin/deno test -A --no-check "${part[@]}" > "$log" 2>&1
    rc=$?
    set -e
    cat "$log"
    verdict=$(deno_verdict "$log" "$rc")
    [ "$verdict" = crash ] && verdict=fail
  fi
  if [ "$verdict" = teardown ]; then
    echo "WARNING: Deno group $((g + 1)) aborted (exit $rc) at teardown after every test passed; known issue, not a test failure"
  elif [ "$verdict" = fail ]; then
    echo "Deno group $((g + 1)) of $groups failed (exit $rc)"
    failed=$rc
  fi
done
rm -rf "$dir"
if [ "$failed" -ne 0 ]; then exit "$failed"; fi
echo "== Node ($(node --version))"
# The files run in NODE_SHARDS processes at once (default 2), each importing files and running their
# tests in-process (scripts/node-tests.ts), taking the next file no other process has claimed: Node 20's
# `--test` starts a process per file, whose tsx and module loading cost ~1.7 s a file (845 s for the suite
# that way against 587 s so in CI at aaf95ff, on this 2-core machine; docs/modules.md "Known issues"). A shard that stops
# answering is ended after 30 minutes and fails. A shard whose process dies by a signal (a native crash:
# Dawn's WebGPU on lavapipe crashed in webgpu-hunt2 until each backend stopped making its own Dawn
# instance) has its unfinished files run again one process a file, as `node --test` runs them; a failing
# test there, or a second crash, still fails here.
shards="${NODE_SHARDS:-2}"
dir=$(mktemp -d)
claims="$dir/claims"
mkdir "$claims"
pids=()
for ((k = 0; k < shards; k++)); do
  ( set +e; NODE_TESTS_CLAIMS="$claims" timeout -k 10 1800 node --import tsx --test-reporter=tap scripts/node-tests.ts "${files[@]}" > "$dir/$k.log" 2>&1; echo $? > "$dir/$k.rc" ) &
  pids+=($!)
done
wait "${pids[@]}"
failed=0
crashed=0
for ((k = 0; k < shards; k++)); do
  echo "-- Node shard $((k + 1)) of $shards"
  cat "$dir/$k.log"
  rc=$(cat "$dir/$k.rc")
  if [ "$rc" -eq 0 ]; then continue; fi
  # 124: the timeout; 128 + n: killed by signal n (SIGSEGV 139, SIGABRT 134, SIGBUS 135, SIGILL 132).
  if [ "$rc" -gt 128 ] && [ "$rc" -ne 137 ] && ! grep -Eq '^not ok ' "$dir/$k.log"; then
    echo "WARNING: Node shard $((k + 1)) died by a signal (exit $rc)"
    crashed=1
  else
    echo "Node shard $((k + 1)) of $shards failed (exit $rc)"
    failed=$rc
  fi
done
if [ "$failed" -ne 0 ]; then rm -rf "$dir"; exit "$failed"; fi
if [ "$crashed" -ne 0 ]; then
  # What a crashed shard was running: files claimed whose tests did not end (and any never claimed).
  mapfile -t again < <(for ((i = 0; i < ${#files[@]}; i++)); do [ -d "$claims/$i/done" ] || echo "${files[$i]}"; done)
  echo "WARNING: running once more, one process a file: ${again[*]}"
  rm -rf "$dir"
  node --import tsx --test --test-concurrency=2 --test-timeout=900000 "${again[@]}"
  exit $?
fi
rm -rf "$dir"
