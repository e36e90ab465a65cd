#!/usr/bin/env bash
# Installs what alpa-sim needs (Debian 12 packages, only when missing), configures and
# builds it incrementally in build/. Sourced-free: called by tools/run.sh and tools/test.sh.
#   ALPASIM_BUILD_DIR   build folder (default: build)
#   ALPASIM_CMAKE_ARGS  extra CMake arguments, e.g. "-DALPASIM_WITH_CUDA=OFF"
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${ALPASIM_BUILD_DIR:-$root/build}"

packages=(cmake ninja-build g++ make nlohmann-json3-dev libboost-graph-dev libglpk-dev
          libcli11-dev doctest-dev libbenchmark-dev libonnx-dev libprotobuf-dev
          libopenmpi-dev openmpi-bin)  # MPI: sweeps across the processes of an mpirun job
# Only for the test command (tools/test.sh sets ALPASIM_TEST_PACKAGES=1), so tools/run.sh
# never pulls a browser: chromium for the headless test of the HTML report (tests/browser/),
# python3 for validation/profiles_in_sync (profiles/derive_from_reference.py --check).
test_packages=(chromium python3)
if [ "${ALPASIM_TEST_PACKAGES:-0}" = 1 ]; then packages+=("${test_packages[@]}"); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "alpa-sim setup: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
fi

# Configure on the first run, and again whenever extra CMake arguments are given (cheap when
# the cache exists); later runs only build what changed.
if [ ! -f "$build_dir/build.ninja" ] || [ -n "${ALPASIM_CMAKE_ARGS:-}" ]; then
  # shellcheck disable=SC2086  # ALPASIM_CMAKE_ARGS is a list of arguments
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    ${ALPASIM_CMAKE_ARGS:-} >&2
fi
jobs="$(nproc 2>/dev/null || echo 2)"
cmake --build "$build_dir" -j "$jobs" >&2
