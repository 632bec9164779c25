#!/usr/bin/env bash
# The whole test suite: type check, then every test under Deno and under Node.
# Called by `npm test` (the README's test command) and so by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== CUDA build (nvcc when present)"
CUDA_JOBS="${CUDA_JOBS:-2}" bash scripts/build-cuda.sh
echo "== type check (tsc)"
npx tsc -p .
mapfile -t files < <(find tests -name '*.test.ts' | sort)
echo "== Deno ($(npx deno --version | head -1))"
npx deno test -A --no-check "${files[@]}"
echo "== Node ($(node --version))"
node --import tsx --test --test-concurrency=2 "${files[@]}"
