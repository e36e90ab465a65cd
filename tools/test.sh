#!/usr/bin/env bash
# Quick start, command 2: set up (install, configure, build) and run the whole test suite.
# GPU tests report "skipped" where there is no GPU. Extra arguments go to ctest,
# e.g. tools/test.sh -L unit   or   tools/test.sh -R golden
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ALPASIM_TEST_PACKAGES=1 "$root/tools/setup.sh"
cd "${ALPASIM_BUILD_DIR:-$root/build}"
exec ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
