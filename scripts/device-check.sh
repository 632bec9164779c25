#!/usr/bin/env bash
# One prepared check for a GPU machine (an NVIDIA H200 with nvcc and PyTorch, perhaps no Node or
# Deno and no network). Prepare on the build machine with scripts/device-prepare.sh and carry the
# paths it lists. Steps (≈5 minutes in all): versions; build the addon for this GPU; conformance +
# CUDA kernel tests; golden (and, where Node and node-llama-cpp exist, oracle) generation checks;
# torch baselines; the CUDA timing table, printed last; multi-step decoding's rates (CUDA, WebGPU). Everything lands in $OUT.
#   JS_RUNTIME=/path/to/deno-or-node   use this runtime;   CUDA_ARCHS=90a   arch(s) to build here
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out/device-check}"
mkdir -p "$OUT"
exec > >(tee "$OUT/device-check.log") 2>&1
T0=$(date +%s)
# The whole check must end inside the device call's limit: each step's timeout is cut to what is
# left of DEVICE_CHECK_BUDGET_S (default 420 s), keeping 10 s for the summary.
BUDGET="${DEVICE_CHECK_BUDGET_S:-420}"
export NO_COLOR=1
SUMMARY=()
note() { SUMMARY+=("$(printf '%-34s %s' "$1" "$2")"); }
elapsed() { echo "$(($(date +%s) - T0)) s"; }
limit() {  # limit SECONDS: the smaller of SECONDS and what is left of the budget (at least 5)
  local left=$((BUDGET - 10 - ($(date +%s) - T0)))
  if [ "$left" -lt "$1" ]; then echo $((left > 5 ? left : 5)); else echo "$1"; fi
}

# --- JS runtime: prefer Deno (runs TypeScript without node_modules) --------------------------
RT="${JS_RUNTIME:-}"
if [ -z "$RT" ]; then
  for c in "$(command -v deno || true)" node_modules/deno/deno .cache/device-carry/deno; do
    if [ -n "$c" ] && [ -x "$c" ]; then RT="$c"; break; fi
  done
fi
if [ -z "$RT" ] && [ -f .cache/device-carry/deno.xz ]; then
  if command -v xz >/dev/null; then
    xz -dc .cache/device-carry/deno.xz >/tmp/evolving-deno
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      .cache/device-carry/deno.xz /tmp/evolving-deno
  fi
  chmod +x /tmp/evolving-deno && RT=/tmp/evolving-deno
fi
if [ -z "$RT" ] && command -v node >/dev/null && [ -d node_modules/tsx ]; then RT="$(command -v node)"; fi
run_ts() {  # run_ts test FILES... | run_ts run FILE ARGS...
  local mode=$1; shift
  case "$RT" in
    *deno*) if [ "$mode" = test ]; then "$RT" test -A --no-check "$@"; else "$RT" run -A --no-check "$@"; fi ;;
    *) if [ "$mode" = test ]; then "$RT" --import tsx --test "$@"; else "$RT" --import tsx "$@"; fi ;;
  esac
}

# The tests read ../shared (golden ids); on a GPU machine it comes from the carried copy.
if [ ! -d ../shared/reference ] && [ -d .cache/device-carry/shared/reference ]; then
  ln -sfn "$PWD/.cache/device-carry/shared" ../shared 2>/dev/null || echo "cannot link ../shared: golden tests will fail"
fi

echo "== versions"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory --format=csv,noheader || echo "nvidia-smi: unavailable"
nvcc --version | tail -2 || echo "nvcc: unavailable"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' \
  || echo "torch: unavailable"
if [ -n "$RT" ]; then echo "js runtime: $RT ($("$RT" --version | head -1))"; else echo "js runtime: none found"; fi
git log --oneline -1 2>/dev/null || true

echo "== build ($(elapsed))"
if CUDA_ARCHS="${CUDA_ARCHS:-90a}" CUDA_PTX=0 CUDA_JOBS="$(nproc)" CUDA_BUILD_FORCE=1 timeout "$(limit 150)" bash scripts/build-cuda.sh; then
  note "build (nvcc, this GPU's arch)" "ok"
elif [ -f kernels-cuda/build/evolving_cuda.node ]; then
  note "build (nvcc, this GPU's arch)" "FAILED; using the carried addon"
else
  note "build (nvcc, this GPU's arch)" "FAILED; no addon"
fi
cp kernels-cuda/build/resource-usage.txt "$OUT/" 2>/dev/null || true

# WebGPU there runs through the NVIDIA Vulkan driver; the image may lack the loader (libvulkan1,
# carried as .gl/*.deb and unpacked by the caller) and name no ICD. The conformance suite requires
# WebGPU on CI machines; here a missing adapter must not hide the CUDA results, so it may skip, and
# the probe below says whether WebGPU really ran.
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
export EVOLVING_ALLOW_NO_WEBGPU=1
echo "vulkan: VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset}; loader: $(ldconfig -p | grep -c 'libvulkan.so') entries; ICDs:" \
  $(ls /usr/local/nvidia/share/vulkan/icd.d /usr/share/vulkan/icd.d /etc/vulkan/icd.d 2>/dev/null | tr '\n' ' ')
case "$RT" in
  *deno*)
    VK_LOADER_DEBUG=error timeout 30 "$RT" eval 'console.log("adapter:", (await navigator.gpu?.requestAdapter())?.info?.description ?? "none")' 2>&1 | tail -5
    probe=$(timeout 30 "$RT" eval 'const a = await navigator.gpu?.requestAdapter(); console.log(a ? `${a.info.vendor} ${a.info.architecture} ${a.info.device} ${a.info.description}`.trim() || "adapter (no info)" : "none")' 2>&1 | tail -1)
    note "webgpu adapter (Deno, Vulkan)" "${probe:-none}" ;;
  *) note "webgpu adapter" "not probed (Node)" ;;
esac

if [ -z "$RT" ]; then
  note "tests and timing" "SKIPPED: no Deno or Node (see scripts/device-prepare.sh)"
else
  echo "== conformance + CUDA kernel tests ($(elapsed))"
  tests=(tests/backend/cuda-*.test.ts)
  [ -f tests/backend/conformance.test.ts ] && tests=(tests/backend/conformance.test.ts "${tests[@]}")
  # Synchronous launches: a kernel's fault is reported by the call that launched it, not a later one.
  if CUDA_LAUNCH_BLOCKING=1 timeout "$(limit 150)" bash -c "$(declare -f run_ts); RT='$RT' run_ts test ${tests[*]}" >"$OUT/tests-backend.log" 2>&1; then
    note "conformance + cuda kernel tests" "ok ($(grep -Eo '[0-9]+ passed.*' "$OUT/tests-backend.log" | tail -1))"
  else
    note "conformance + cuda kernel tests" "FAILED (see tests-backend.log)"
  fi
  tail -30 "$OUT/tests-backend.log"

  echo "== golden generation (stories260K, every backend incl. cuda) ($(elapsed))"
  if timeout "$(limit 90)" bash -c "$(declare -f run_ts); RT='$RT' run_ts test tests/model/forward-golden.test.ts" >"$OUT/tests-golden.log" 2>&1; then
    note "golden greedy ids (forward-golden)" "ok"
  else
    note "golden greedy ids (forward-golden)" "FAILED (see tests-golden.log)"
  fi
  tail -15 "$OUT/tests-golden.log"
  if command -v node >/dev/null && [ -d node_modules/node-llama-cpp ] && [ -f tests/oracle/llama-cpp.test.ts ]; then
    echo "== oracle (llama.cpp) ($(elapsed))"
    if timeout "$(limit 90)" node --import tsx --test tests/oracle/llama-cpp.test.ts >"$OUT/tests-oracle.log" 2>&1; then
      note "oracle (llama.cpp log-probs)" "ok"
    else
      note "oracle (llama.cpp log-probs)" "FAILED (see tests-oracle.log)"
    fi
  else
    note "oracle (llama.cpp log-probs)" "skipped: needs Node + node_modules/node-llama-cpp"
  fi

  echo "== torch baselines ($(elapsed))"
  if timeout "$(limit 60)" python3 scripts/device-torch.py "$OUT/torch.json"; then note "torch baselines" "ok"; else note "torch baselines" "FAILED"; fi

  if [ "${DEVICE_SWEEP:-1}" = 1 ]; then
    # Variants of the decode kernels (kernels-cuda/bench/sweep.cu), for choosing their constants.
    echo "== kernel variant sweep ($(elapsed))"
    if nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -I kernels-cuda kernels-cuda/bench/sweep.cu \
      -o /tmp/evolving-sweep && timeout "$(limit 90)" /tmp/evolving-sweep decode | tee "$OUT/sweep.txt"; then
      note "kernel variant sweep" "ok (sweep.txt)"
    else
      note "kernel variant sweep" "FAILED"
    fi
  fi

  echo "== CUDA timing ($(elapsed))"
  if timeout "$(limit 180)" bash -c "$(declare -f run_ts); RT='$RT' run_ts run scripts/device-bench-cuda.ts --torch '$OUT/torch.json' --out '$OUT'"; then
    note "cuda timing" "ok"
  else
    note "cuda timing" "FAILED"
  fi

  # Multi-step decoding on this GPU (docs/bench-engine.md "Multi-step decoding"): CUDA (off by default
  # there, unmeasured) and, where Deno has the Vulkan adapter, WebGPU on a hardware GPU.
  echo "== multi-step decoding ($(elapsed))"
  for be in cuda webgpu; do
    if timeout "$(limit 40)" bash -c "$(declare -f run_ts); RT='$RT' run_ts run scripts/bench-multi-step.ts --backend $be --steps 1,2,4,8 --requests 1 --tokens 96 --rounds 2" >"$OUT/multi-step-$be.txt" 2>&1; then
      note "multi-step ($be)" "ok (multi-step-$be.txt)"
    else
      note "multi-step ($be)" "FAILED or no adapter (multi-step-$be.txt)"
    fi
    tail -6 "$OUT/multi-step-$be.txt"
  done

  if [ "${DEVICE_SWEEP:-1}" = 1 ] && [ -x /tmp/evolving-sweep ]; then
    # The set-aside wgmma GEMM (kernels-cuda/bench/matmul_wgmma.cuh) against the built mma.sync one:
    # last, since a kernel that has never run may hang (it gives up after 20 s and says so).
    echo "== set-aside wgmma matmul ($(elapsed))"
    if timeout "$(limit 60)" /tmp/evolving-sweep matmul | tee "$OUT/sweep-matmul.txt" && ! grep -q "WGMMA MISMATCH\|WGMMA HANG" "$OUT/sweep-matmul.txt"; then
      note "wgmma matmul sweep" "ok (sweep-matmul.txt)"
    else
      note "wgmma matmul sweep" "FAILED (sweep-matmul.txt)"
    fi
  fi
fi

echo
echo "== summary ($(elapsed))"
printf '%s\n' "${SUMMARY[@]}"
echo
cat "$OUT/cuda-table.md" 2>/dev/null || echo "(no timing table)"
