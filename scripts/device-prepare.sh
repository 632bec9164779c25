#!/usr/bin/env bash
# Run HERE (the build machine) before scripts/device-check.sh goes to a GPU machine that may lack
# Node, Deno, Node's headers and the network. Builds the full addon (sm_90a, sm_100a, sm_103a +
# PTX) and packs what the GPU machine needs into .cache/device-carry/ (git-ignored):
#   deno.xz        the Deno binary from node_modules/deno (xz, ~35 MB; device-check unpacks it)
#   node-include/  Node-API C headers (so the GPU machine can rebuild the addon with its nvcc)
#   shared/reference  golden ids the generation tests read from ../shared (absent on the GPU machine)
# Then carry these ignored paths with the repository (64 MiB in all; the script prints the total):
#   .cache/device-carry  kernels-cuda/build  node_modules/node-addon-api  node_modules/wgsl-preprocessor
#   node_modules/@huggingface
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=.cache/device-carry
mkdir -p "$CARRY/node-include"
CUDA_JOBS="${CUDA_JOBS:-2}" bash scripts/build-cuda.sh
rm -rf kernels-cuda/build/obj  # objects are rebuilt on the GPU machine; the addon itself is carried
for h in node_api.h node_api_types.h js_native_api.h js_native_api_types.h; do
  for d in /usr/include/node /usr/local/include/node; do
    if [ -f "$d/$h" ]; then cp "$d/$h" "$CARRY/node-include/"; break; fi
  done
done
if [ -d ../shared/reference ]; then mkdir -p "$CARRY/shared" && cp -r ../shared/reference "$CARRY/shared/"; fi
if [ ! -f "$CARRY/deno.xz" ] || [ node_modules/deno/deno -nt "$CARRY/deno.xz" ]; then
  echo "device-prepare: compressing node_modules/deno/deno (a minute on 2 cores)"
  xz -6 -T2 -c node_modules/deno/deno >"$CARRY/deno.xz.tmp" && mv "$CARRY/deno.xz.tmp" "$CARRY/deno.xz"
fi
du -shc "$CARRY" kernels-cuda/build node_modules/node-addon-api node_modules/wgsl-preprocessor node_modules/@huggingface
