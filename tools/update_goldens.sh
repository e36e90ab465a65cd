#!/usr/bin/env bash
# Rewrites tests/golden/<name>.json from `alpa-sim --json scenarios/<name>.json`.
# Run it on purpose, after a behaviour change, and review the diff like code.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bin/alpa-sim
[ -x "$bin" ] || { echo "build first: $bin is missing" >&2; exit 1; }
for scenario in scenarios/*.json; do
  name=$(basename "$scenario" .json)
  "$bin" --json --no-timing "$scenario" > "tests/golden/$name.json"
  echo "updated tests/golden/$name.json"
done
