"""OpenVINO: ONNX Runtime's ``onnxruntime-openvino`` package, registered with the runner factory.

It replaces the ``onnxruntime`` module, so it runs like another release of ONNX Runtime
(``_onnxruntime.py``), in its isolated environment (``onnxruntime-openvino==1.24.1``). What is
its own: the provider it brings (which may run on an accelerator, depending on the device, and
is listed after DirectML's, where provider lists have always shown it), and that reading its
kernel registry crashes (signal 11 in ``get_all_opkernel_def``, seen in onnxruntime-openvino
1.24.1), so the probe skips it.
"""

from __future__ import annotations

from onnxgate.runners._onnxruntime import open_ort, ort_script, ort_worker
from onnxgate.runners.runtimes import Provider, Runtime

PROVIDER = "OpenVINOExecutionProvider"
RELEASE = "onnxruntime-openvino==1.24.1"
"""The release onnxgate runs OpenVINO through when the installed ONNX Runtime lacks it."""

OPENVINO = Runtime(
    "openvino",
    ("onnxruntime-openvino",),
    open=open_ort,
    worker=ort_worker,
    script=ort_script,
    providers=(
        Provider(
            PROVIDER,
            "onnxruntime-openvino",
            accelerator=True,
            kernel_registry=False,
            listed_after="DmlExecutionProvider",
            isolated=RELEASE,
        ),
    ),
)
