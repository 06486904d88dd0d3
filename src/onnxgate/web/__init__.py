"""The web target: what a web app loads, proven on ``onnxruntime-web`` in a headless Chromium.

``web_target`` writes the model (``.onnx``, or ``.ort`` through ``mobile``'s converter), the
contract's input spec as JSON and the proof: the golden samples on the written file in the
browser, judged by the contract's rules. ``deploy web`` and the gate's ``[steps.web]`` call it.
"""

from onnxgate.web._render import render_web
from onnxgate.web._target import (
    PROOF_FORMAT,
    SPEC_FORMAT,
    WEB_RELEASE,
    WebOptions,
    WebReport,
    input_spec,
    web_runtime,
    web_target,
)

__all__ = [
    "PROOF_FORMAT",
    "SPEC_FORMAT",
    "WEB_RELEASE",
    "WebOptions",
    "WebReport",
    "input_spec",
    "render_web",
    "web_runtime",
    "web_target",
]
