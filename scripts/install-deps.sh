#!/usr/bin/env bash
# Installs the Debian 12 packages ctrain needs, when any is missing. Safe to run repeatedly:
# with everything present it only checks.
set -euo pipefail

pkgs=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev clang-format libomp-dev
      libopenblas-dev libdnnl-dev zlib1g-dev libjansson-dev libfyaml-dev libpng-dev
      dataset-fashion-mnist fortunes protobuf-compiler libopenmpi-dev openmpi-bin python3-sklearn
      chromium mpich libmpich-dev qemu-user)
# PyTorch: make test's interop tests (tests/e2e/interop_*.py) and bench/; --bench is accepted
pkgs+=(python3-torch python3-numpy)

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
