#!/usr/bin/env bash
# Installs what the project needs beyond npm packages: Mesa's software Vulkan driver (lavapipe),
# so WebGPU has an adapter on a machine without a GPU. Mesa 25 comes from bookworm-backports
# because Node's `webgpu` package (Dawn) needs it; Deno's WebGPU works with either.
# Idempotent: does nothing when a lavapipe ICD is already present.
set -euo pipefail
if ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 && dpkg -s mesa-vulkan-drivers 2>/dev/null | grep -q '^Version: 25'; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
if [ -r /etc/debian_version ] && grep -q '^12' /etc/debian_version; then
  if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "deb http://deb.debian.org/debian bookworm-backports main" | $SUDO tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers libvulkan1 >/dev/null
else
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
fi
echo "setup: installed Mesa lavapipe ($(dpkg -s mesa-vulkan-drivers | sed -n 's/^Version: //p'))"
