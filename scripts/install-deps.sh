#!/usr/bin/env bash
# Installs the Debian 12 packages ctrain needs, when any is missing. Safe to run repeatedly:
# with everything present it only checks.
set -euo pipefail

pkgs=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev clang-format libomp-dev
      libopenblas-dev libdnnl-dev zlib1g-dev libjansson-dev libfyaml-dev libpng-dev
      dataset-fashion-mnist fortunes protobuf-compiler libopenmpi-dev openmpi-bin python3-sklearn
      chromium mpich libmpich-dev qemu-user)
# ONNX export (libprotobuf-c, onnx.proto) and its test (onnx's checker; onnxruntime-node from npm)
pkgs+=(libprotobuf-c-dev protobuf-c-compiler libonnx-dev python3-onnx)
# Debian's nodejs and npm, unless a Node.js with npm is installed already (nodesource's nodejs
# package carries npm, and conflicts with Debian's npm package)
command -v npm >/dev/null || pkgs+=(nodejs npm)
# the Python package (python/) and its test: numpy for arrays, pip and setuptools to install it
# offline, PyYAML for Run.config
pkgs+=(python3-numpy python3-pip python3-setuptools python3-yaml)
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
