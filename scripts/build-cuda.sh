#!/usr/bin/env bash
# Builds the CUDA addon (kernels-cuda/ → kernels-cuda/build/evolving_cuda.node): cubins for
# sm_90a (H100/H200), sm_100a (B200) and sm_103a (GB300) plus compute_90 PTX for anything newer,
# linked with the static CUDA runtime (libcuda is only dlopen'ed when a context is made, so the
# addon loads on machines without a driver). Part of the install; without nvcc it says so and
# exits 0. Writes ptxas's resource report (-Xptxas -v) to kernels-cuda/build/resource-usage.txt.
#   CUDA_ARCHS="90a"   build one architecture (development); default "90a 100a 103a"
#   CUDA_PTX=0         skip the PTX; CUDA_BUILD_FORCE=1 rebuild even when up to date
#   CUDA_JOBS=8        compile the .cu files in parallel (default 1: CI machines are small)
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=kernels-cuda
OUT=$SRC/build
NVCC="${NVCC:-$(command -v nvcc || true)}"
if [ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc; fi
if [ -z "$NVCC" ]; then
  echo "build-cuda: nvcc not found, skipping the CUDA addon (the cuda backend will report itself unavailable)"
  exit 0
fi
if [ -z "${CUDA_HOME:-}" ]; then
  CUDA_HOME=$(cd "$(dirname "$(readlink -f "$NVCC")")/.." && pwd)
  if [ ! -f "$CUDA_HOME/include/cuda_runtime.h" ] && [ -d /usr/local/cuda ]; then CUDA_HOME=/usr/local/cuda; fi
fi
ARCHS="${CUDA_ARCHS:-90a 100a 103a}"
PTX="${CUDA_PTX:-1}"
NODE_INC=""
for d in "${NODE_INCLUDE:-}" /usr/include/node /usr/local/include/node .cache/device-carry/node-include \
  "$HOME"/.cache/node-gyp/*/include/node; do
  if [ -n "$d" ] && [ -f "$d/node_api.h" ]; then NODE_INC="$d"; break; fi
done
NAPI_INC=node_modules/node-addon-api
if [ -z "$NODE_INC" ] || [ ! -f "$NAPI_INC/napi.h" ]; then
  echo "build-cuda: Node-API headers not found (node_api.h: '${NODE_INC:-none}', napi.h: $NAPI_INC), skipping"
  exit 0
fi
mkdir -p "$OUT/obj"
STAMP="$OUT/build.stamp"
WANT="archs=$ARCHS ptx=$PTX nvcc=$("$NVCC" --version | tail -1)"
if [ "${CUDA_BUILD_FORCE:-0}" != 1 ] && [ -f "$OUT/evolving_cuda.node" ] && [ -f "$STAMP" ] &&
  [ "$(cat "$STAMP")" = "$WANT" ] && [ -z "$(find $SRC -maxdepth 1 -newer "$OUT/evolving_cuda.node" -type f)" ]; then
  echo "build-cuda: up to date ($OUT/evolving_cuda.node)"
  exit 0
fi
GENCODE=()
for a in $ARCHS; do GENCODE+=(-gencode "arch=compute_$a,code=sm_$a"); done
if [ "$PTX" = 1 ]; then GENCODE+=(-gencode "arch=compute_90,code=compute_90"); fi
REPORT="$OUT/resource-usage.txt"
JOBS="${CUDA_JOBS:-1}"
start=$(date +%s)
OBJS=()
rm -f "$OUT"/obj/*.ptxas.txt
pids=()
failed=0
for cu in "$SRC"/*.cu; do
  name=$(basename "$cu" .cu)
  echo "build-cuda: nvcc $name.cu ($ARCHS$([ "$PTX" = 1 ] && echo " +ptx"))"
  "$NVCC" -std=c++17 -O3 -Xcompiler -fPIC -lineinfo "${GENCODE[@]}" -Xptxas -v -c "$cu" -o "$OUT/obj/$name.o" \
    2>"$OUT/obj/$name.ptxas.txt" &
  pids+=($!)
  OBJS+=("$OUT/obj/$name.o")
  if [ "${#pids[@]}" -ge "$JOBS" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
cat "$OUT"/obj/*.ptxas.txt >"$REPORT"
grep -E "error|warning" "$REPORT" >&2 || true
if [ "$failed" != 0 ]; then
  echo "build-cuda: nvcc failed (see $REPORT)" >&2
  exit 1
fi
CXXFLAGS=(-std=c++17 -O2 -fPIC -fexceptions -fvisibility=hidden -DNAPI_VERSION=8 -DNAPI_CPP_EXCEPTIONS
  -I"$NODE_INC" -I"$NAPI_INC" -I"$CUDA_HOME/include")
for cpp in binding context; do
  g++ "${CXXFLAGS[@]}" -c "$SRC/$cpp.cpp" -o "$OUT/obj/$cpp.o"
  OBJS+=("$OUT/obj/$cpp.o")
done
# cudart_static: no libcudart.so at run time; it dlopens libcuda.so.1 on first use.
g++ -shared -o "$OUT/evolving_cuda.node" "${OBJS[@]}" -L"$CUDA_HOME/lib64" -lcudart_static -ldl -lrt -lpthread \
  -static-libstdc++ -static-libgcc -Wl,--exclude-libs,ALL
echo "$WANT" >"$STAMP"
spills=$(grep -Ec "[1-9][0-9]* bytes spill (stores|loads)" "$REPORT" || true)
echo "build-cuda: built $OUT/evolving_cuda.node in $(($(date +%s) - start)) s; resource report $REPORT ($spills entries with spills)"
