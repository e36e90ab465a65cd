#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan, every library instrumented)
# in build-fuzz/ and runs each on its seed corpus (fuzz/corpus/<target>/).
#   tools/fuzz.sh [RUNS_PER_TARGET] [TARGET...]     default 1000000 runs, every target;
#                                                  0 only builds (tools/test.sh does that)
#   ALPASIM_FUZZ_BUILD_DIR  build folder (default: build-fuzz)
#   ALPASIM_FUZZ_SECONDS    stop each target after this many seconds as well (default: none)
# A crash leaves its input as build-fuzz/crash-<target>-* and exits 1; turn it into a
# regression test (tests/cli/reliability/) before fixing it. Exit 77 without clang.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ALPASIM_FUZZ_BUILD_DIR:-$root/build-fuzz}"
runs="${1:-1000000}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_scenario fuzz_plan fuzz_profile fuzz_hf_config fuzz_onnx)
clangxx="$(command -v clang++ || true)"
if [ -z "$clangxx" ]; then echo "SKIP: no clang++ (apt-get install clang)"; exit 77; fi
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$clangxx" -DALPASIM_FUZZ=ON -DALPASIM_WITH_CUDA=OFF \
    -DALPASIM_WITH_MPI=OFF -DALPASIM_BUILD_TESTS=OFF -DALPASIM_BUILD_BENCHMARKS=OFF >&2
fi
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target "${targets[@]}" >&2
[ "$runs" != 0 ] || exit 0
status=0
for t in "${targets[@]}"; do
  corpus="$root/fuzz/corpus/${t#fuzz_}"
  work="$build/corpus-$t"  # new inputs go here, so the committed seeds stay as they are
  mkdir -p "$work"
  extra=()
  [ -z "${ALPASIM_FUZZ_SECONDS:-}" ] || extra+=("-max_total_time=$ALPASIM_FUZZ_SECONDS")
  echo "== $t: $runs runs" >&2
  if ! (cd "$build" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "./bin/$t" -runs="$runs" -max_len=65536 -rss_limit_mb=4096 -timeout=30 \
        -artifact_prefix="crash-$t-" "${extra[@]}" "$work" "$corpus" 2>&1 | tail -n 25); then
    status=1
  fi
done
exit $status
