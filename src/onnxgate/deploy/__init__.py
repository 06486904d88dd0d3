"""Deploy a gated model where teams already serve: a Triton model repository, checked.

``deploy_triton`` writes the repository (model, contract, ``config.pbtxt`` built from the
contract, warm-up data from the golden samples) and checks what it wrote; ``check_repository``
runs the same checks on a repository written by hand; both need the ``deploy`` extra
(``tritonclient``'s ``model_config_pb2``), imported only when they run. ``deploy_kserve`` writes
the KServe InferenceService that serves such a repository (the ``kserve`` extra).
``deploy_mobile`` writes ONNX Runtime's ORT format for mobile and minimal builds, proven on the
golden samples and held to edge budgets. ``deploy_web`` writes what a web app loads (the model,
its input spec as JSON) proven on ``onnxruntime-web`` in a headless Chromium.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onnxgate.deploy._check import check_repository
from onnxgate.deploy._findings import RULES, Finding, RepositoryCheck
from onnxgate.deploy._render import render_check, render_kserve, render_triton

if TYPE_CHECKING:
    from onnxgate.deploy._kserve import KServeConfig, KServeReport, deploy_kserve
    from onnxgate.deploy._mobile import MobileDeployConfig, deploy_mobile
    from onnxgate.deploy._triton import DeployReport, TritonConfig, deploy_triton
    from onnxgate.deploy._web import WebConfig, deploy_web

__all__ = [
    "RULES",
    "DeployReport",
    "Finding",
    "KServeConfig",
    "KServeReport",
    "MobileDeployConfig",
    "RepositoryCheck",
    "TritonConfig",
    "WebConfig",
    "check_repository",
    "deploy_kserve",
    "deploy_mobile",
    "deploy_triton",
    "deploy_web",
    "render_check",
    "render_kserve",
    "render_triton",
]


def __getattr__(name: str) -> Any:
    if name in ("DeployReport", "TritonConfig", "deploy_triton"):
        from onnxgate.deploy import _triton

        return getattr(_triton, name)
    if name in ("KServeConfig", "KServeReport", "deploy_kserve"):
        from onnxgate.deploy import _kserve

        return getattr(_kserve, name)
    if name in ("MobileDeployConfig", "deploy_mobile"):
        from onnxgate.deploy import _mobile

        return getattr(_mobile, name)
    if name in ("WebConfig", "deploy_web"):
        from onnxgate.deploy import _web

        return getattr(_web, name)
    raise AttributeError(name)
