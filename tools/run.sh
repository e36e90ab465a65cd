#!/usr/bin/env bash
# Quick start, command 1: set up (install, configure, build) and run alpa-sim.
# With no arguments it runs the built-in default scenario; arguments go to alpa-sim,
# e.g. tools/run.sh scenarios/alpa_gpt3_39b_p3_64gpu.json --json
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/setup.sh"
exec "${ALPASIM_BUILD_DIR:-$root/build}/bin/alpa-sim" "$@"
