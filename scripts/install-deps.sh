#!/usr/bin/env bash
# Installs ztrain's build and test dependencies from Debian 12's archive when
# any is missing. Safe to run repeatedly; does nothing when all are present.
set -euo pipefail

PACKAGES=(
  cmake ninja-build ccache g++
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libopenblas-dev libopenblas-openmp-dev libdnnl-dev liburing-dev libgtest-dev
  libopenmpi-dev openmpi-bin nlohmann-json3-dev
  python3 python3-numpy python3-pytest python3-torch
  slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge
  fio
  clang-22 libclang-rt-22-dev libfuzzer-22-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if ((${#missing[@]})); then
  echo "ztrain: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
