#!/usr/bin/env bash
# Installs what the project needs beyond npm packages, from Debian:
# - Mesa's software Vulkan driver (lavapipe), so WebGPU has an adapter on a machine without a GPU.
#   Mesa 25 comes from bookworm-backports because Node's `webgpu` package (Dawn) needs it; Deno's
#   WebGPU works with either.
# - nats-server, the NATS control plane that `serve --nats` and `worker --nats` use (its tests run a
#   real one).
# Idempotent: installs only what is missing.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
# lavapipe maps memory for every buffer and pipeline, and one Deno process running the whole suite
# passes 65530 mappings (Linux's default vm.max_map_count; measured on the llama.cpp oracle file
# alone: ~67k), where mmap fails and Deno dies in glibc ("corrupted size vs. prev_size", or a
# segfault mid-run). Raise the limit where we may; say so where we may not.
if [ -r /proc/sys/vm/max_map_count ] && [ "$(cat /proc/sys/vm/max_map_count)" -lt 262144 ]; then
  $SUDO sysctl -q -w vm.max_map_count=262144 2>/dev/null ||
    echo "setup: could not raise vm.max_map_count to 262144 (WebGPU tests on lavapipe may abort past 65530 mappings)"
fi
need_mesa=1
if ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 && dpkg -s mesa-vulkan-drivers 2>/dev/null | grep -q '^Version: 25'; then
  need_mesa=0
fi
need_nats=1
if command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ]; then need_nats=0; fi
if [ "$need_mesa" = 0 ] && [ "$need_nats" = 0 ]; then exit 0; fi
bookworm=0
if [ -r /etc/debian_version ] && grep -q '^12' /etc/debian_version; then bookworm=1; fi
if [ "$need_mesa" = 1 ] && [ "$bookworm" = 1 ] && ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "deb http://deb.debian.org/debian bookworm-backports main" | $SUDO tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
fi
$SUDO apt-get update -qq
if [ "$need_mesa" = 1 ]; then
  if [ "$bookworm" = 1 ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers libvulkan1 >/dev/null
  else
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
  fi
  echo "setup: installed Mesa lavapipe ($(dpkg -s mesa-vulkan-drivers | sed -n 's/^Version: //p'))"
fi
if [ "$need_nats" = 1 ]; then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nats-server >/dev/null
  echo "setup: installed nats-server ($(dpkg -s nats-server | sed -n 's/^Version: //p'))"
fi
