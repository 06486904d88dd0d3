#!/usr/bin/env bash
# The demo: describe a real model and check it against the installed ONNX Runtime and an older
# release (installed once into an isolated environment in the user cache, then probed). Then the
# same model re-stamped at opset 20, as a newer exporter would write it: the older release refuses it.
set -uo pipefail
MODEL=$(python -c 'import onnx, pathlib; print(pathlib.Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx")')
OLD=${ONNXGATE_DEMO_RUNTIME:-onnxruntime==1.16.3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; echo "(exit $?)"; }

step onnxgate inspect "$MODEL"
step onnxgate check "$MODEL"
step onnxgate check "$MODEL" --runtime "$OLD"

python - "$MODEL" "$WORK/resnet50_opset20.onnx" <<'PY'
import sys
import onnx
from onnx import version_converter
model = version_converter.convert_version(onnx.load(sys.argv[1]), 20)
model.ir_version = 9  # the converter keeps IR 3; opset 20 came with IR 9
onnx.save_model(model, sys.argv[2])
PY
step onnxgate check "$WORK/resnet50_opset20.onnx" --ignore SHP001
step onnxgate check "$WORK/resnet50_opset20.onnx" --ignore SHP001 --runtime "$OLD"
# A GPU deployment of the same model: this CPU build has no CUDA provider.
step onnxgate check "$MODEL" --providers cuda --ignore SHP001
exit 0
