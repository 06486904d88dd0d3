"""The shared trace parser, in-process and where ``_assign.py`` runs as a script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from models import mlp, save
from onnxgate.placement import _assign, _trace


def test_only_kernel_calls_with_a_provider_are_node_events():
    events = [
        {"cat": "Node", "name": "a_fence_before", "ts": 1, "dur": 1, "args": {"op_name": "Relu"}},
        {
            "cat": "Node",
            "name": "a_kernel_time",
            "ts": 2,
            "dur": 3,
            "args": {
                "op_name": "Relu",
                "provider": "CPUExecutionProvider",
                "input_type_shape": [{"float": [2, 3]}, {}],
                "output_type_shape": [{"float": [2, 3]}],
            },
        },
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 10},
    ]
    (call,) = _trace.node_events(events)
    assert (call.node, call.op_type, call.provider, call.dur) == (
        "a",
        "Relu",
        "CPUExecutionProvider",
        3,
    )
    assert call.inputs == (_trace.TensorType("float", (2, 3)), _trace.TensorType("", ()))
    assert _trace.run_windows(events) == [(0, 10)]
    assert _trace.within([call], [(3, 9)]) == [] and _trace.within([call], [(0, 10)]) == [call]


def test_assign_runs_as_a_script_and_finds_the_parser_beside_it(tmp_path):
    """As inside an isolated environment: ``python _assign.py request answer``, run by path.

    It finds the trace parser beside it and the settings applier in ``runners/``, and the session
    it audits applies every setting it was given (threads and config entries too).
    """
    path = save(mlp(), tmp_path / "mlp.onnx")
    np.savez(tmp_path / "feeds.npz", x=np.ones((2, 4), np.float32))
    request = {
        "model": str(path),
        "settings": {
            "providers": ["CPUExecutionProvider"],
            "optimization": "disable",
            "intra_op_threads": 1,
            "config": {"session.intra_op.allow_spinning": "0"},
        },
        "method": "profiling",
        "feeds": str(tmp_path / "feeds.npz"),
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    # an isolated environment has no onnxgate: shadow the installed one with a package that fails
    shadow = tmp_path / "shadow" / "onnxgate"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no onnxgate in isolated envs')\n")
    done = subprocess.run(
        [
            sys.executable,
            _assign.__file__,
            str(tmp_path / "request.json"),
            str(tmp_path / "a.json"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(shadow.parent)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(Path(tmp_path / "a.json").read_text())
    assert answer["method"] == "profiling"
    assert [n[:2] for n in answer["nodes"]] == [["mm", "MatMul"], ["add", "Add"], ["relu", "Relu"]]
    applied = answer["settings"]
    assert applied["optimization"] == "disable" and applied["intra_op_threads"] == 1
    assert applied["config"] == {"session.intra_op.allow_spinning": "0"}
