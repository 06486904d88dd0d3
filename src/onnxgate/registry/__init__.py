"""The model registry: gated versions, aliases, gate runs and a content-addressed artefact store.

SQLite is the embedded default (``$ONNXGATE_REGISTRY`` or a URL for PostgreSQL); artefacts live
in a store folder by sha256. Open with :func:`open_registry`::

    from onnxgate.registry import open_registry

    with open_registry() as registry:
        version = registry.register("bert", {"model": path}, gate=report, alias="champion")
        registry.fetch("bert@champion", "deploy/")
"""

from onnxgate.registry._mlflow import MlflowPublication, publish_mlflow
from onnxgate.registry._mlflow import tracking_uri as tracking_uri_of
from onnxgate.registry._mlflow_fetch import (
    MlflowFetch,
    fetch_mlflow,
    is_mlflow_ref,
    parse_mlflow_ref,
)
from onnxgate.registry._records import (
    ArtefactRecord,
    FetchedFile,
    FetchResult,
    FsckProblem,
    FsckReport,
    GateRunRecord,
    ModelSummary,
    ModelVersion,
    PerformanceRecord,
    PromotionRecord,
    ShadowRunRecord,
    StepRecord,
    VersionDetail,
    parse_ref,
)
from onnxgate.registry._registry import Registry, open_registry
from onnxgate.registry._render import (
    render_detail,
    render_fetch,
    render_fsck,
    render_models,
    render_promoted,
    render_shadow,
    render_versions,
)

__all__ = [
    "ArtefactRecord",
    "FetchResult",
    "FetchedFile",
    "FsckProblem",
    "FsckReport",
    "GateRunRecord",
    "MlflowFetch",
    "MlflowPublication",
    "ModelSummary",
    "ModelVersion",
    "PerformanceRecord",
    "PromotionRecord",
    "Registry",
    "ShadowRunRecord",
    "StepRecord",
    "VersionDetail",
    "fetch_mlflow",
    "is_mlflow_ref",
    "open_registry",
    "parse_mlflow_ref",
    "parse_ref",
    "publish_mlflow",
    "render_detail",
    "render_fetch",
    "render_fsck",
    "render_models",
    "render_promoted",
    "render_shadow",
    "render_versions",
    "tracking_uri_of",
]
