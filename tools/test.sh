#!/usr/bin/env bash
# Quick start, command 2: set up (install, configure, build) and run the test suite.
# GPU tests report "skipped" where there is no GPU. Without arguments every test runs except
# those labelled "slow" (golden runs of the 32-1024-GPU searches, minutes each), so the suite
# stays under 10 minutes on 2 cores. Arguments replace that default and go to ctest, e.g.
#   tools/test.sh -L slow      tools/test.sh -L unit      tools/test.sh -R golden
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ALPASIM_TEST_PACKAGES=1 "$root/tools/setup.sh"
# The libFuzzer targets (clang; ASan + UBSan) for the CTest label "fuzz", which runs each
# briefly on its seed corpus; without clang those tests report "skipped".
if command -v clang++ > /dev/null 2>&1; then
  ALPASIM_FUZZ_BUILD_DIR="$root/build-fuzz" "$root/tools/fuzz.sh" 0 >&2
fi
cd "${ALPASIM_BUILD_DIR:-$root/build}"
if [ $# -eq 0 ]; then set -- -LE slow; fi
exec ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
