"""A KServe ``InferenceService`` that serves a deployed Triton repository, built with KServe's types.

The manifest is built from KServe's own typed models (``V1beta1InferenceService`` and the
Kubernetes client's ``V1ObjectMeta``, ``V1ResourceRequirements``, ``V1Probe``) and serialised
by KServe's API client, so a required field left out or a value those types refuse fails
here, not in the cluster. ``import kserve`` parses ``sys.argv`` and
builds its model server's web app as a side effect, so that part runs in a child Python (the
same interpreter, the ``kserve`` extra) that answers one JSON document.

The predictor runs the Triton runtime (``kserve-tritonserver``, protocol v2) on the repository
``deploy triton`` wrote, from ``storage_uri``; the readiness probe asks Triton's
``/v2/models/NAME/ready``, which stays false until the model's warm-ups (its golden samples)
have run.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from onnxgate._fs import atomic_write_text
from onnxgate._words import setting
from onnxgate.deploy._gated import open_gated
from onnxgate.errors import ConfigError, ExtraMissing, InternalError
from onnxgate.settings import Part

log = logging.getLogger(__name__)

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
"""An InferenceService name: a DNS-1123 label (KServe turns it into hostnames)."""
HTTP_PORT = 8080
"""The HTTP port of KServe's Triton runtime (``--http-port=8080``)."""

_BUILD = r"""
import json, sys
sys.argv = sys.argv[:1]  # kserve parses the command line when imported
try:
    from importlib import metadata
    from kserve import (V1beta1InferenceService, V1beta1InferenceServiceSpec,
                        V1beta1ModelFormat, V1beta1ModelSpec, V1beta1PredictorSpec, constants)
    from kserve.api_client import ApiClient  # KServe's: camelCase keys, nulls dropped
    from kubernetes.client import V1HTTPGetAction, V1ObjectMeta, V1Probe, V1ResourceRequirements
except ImportError as err:
    print(json.dumps({"missing": str(err)}))
    raise SystemExit(0)
p = json.load(sys.stdin)
try:
    probe = V1Probe(
        http_get=V1HTTPGetAction(path=p["ready_path"], port=p["port"]),
        initial_delay_seconds=5, period_seconds=5, failure_threshold=p["failure_threshold"],
    )
    model = V1beta1ModelSpec(
        model_format=V1beta1ModelFormat(name="triton"),
        protocol_version="v2",
        runtime=p["runtime"],
        storage_uri=p["storage_uri"],
        resources=V1ResourceRequirements(requests=p["requests"], limits=p["limits"]),
        readiness_probe=probe,
    )
    predictor = V1beta1PredictorSpec(
        model=model, min_replicas=p["min_replicas"], max_replicas=p["max_replicas"]
    )
    service = V1beta1InferenceService(
        api_version=constants.KSERVE_V1BETA1,
        kind=constants.KSERVE_KIND_INFERENCESERVICE,
        metadata=V1ObjectMeta(
            name=p["name"], namespace=p["namespace"], annotations=p["annotations"]
        ),
        spec=V1beta1InferenceServiceSpec(predictor=predictor),
    )
except (ValueError, TypeError) as err:
    print(json.dumps({"invalid": str(err)}))
    raise SystemExit(0)
manifest = ApiClient().sanitize_for_serialization(service)
model = manifest["spec"]["predictor"]["model"]
if not model.get("name"):  # the container name: '' unless set, which KServe fills in
    model.pop("name", None)
print(json.dumps({"manifest": manifest, "kserve": metadata.version("kserve")}))
"""


class KServeConfig(Part):
    """Where the repository is, what the service is called, and what it may use."""

    storage_uri: str = Field(min_length=1)
    """The Triton repository ``deploy triton`` wrote, where the cluster reads it
    (``s3://bucket/models``, ``gs://...``, ``pvc://claim/models``)."""
    name: str | None = None
    """The InferenceService's name (a DNS-1123 label); default: the model's, lowercased."""
    model_name: str | None = None
    """The model's folder in the repository; default: the registry name or the file's stem."""
    namespace: str | None = None
    runtime: str = "kserve-tritonserver"
    cpu: str = "1"
    memory: str = "2Gi"
    gpus: int = Field(0, ge=0)
    min_replicas: int = Field(1, ge=0)
    max_replicas: int | None = Field(None, ge=1)
    failure_threshold: int = Field(60, ge=1)
    """Readiness checks (5 s apart) before the pod is restarted: room for warm-ups and engine builds."""
    out: Path | None = None
    """Write the manifest here (YAML); otherwise it is only reported."""
    registry: str | None = None
    store: str | None = None
    allow_ungated: bool = False


class KServeReport(BaseModel):
    """The manifest, and what built it."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    source: str
    gate: str
    name: str
    model_name: str
    manifest: dict[str, Any]
    yaml: str
    kserve: str
    """The kserve package whose types built and checked it."""
    written: str | None = None
    notes: list[str] = []


def deploy_kserve(
    ref: str | Path,
    config: KServeConfig,
    *,
    progress: Callable[[str], None] | None = None,
) -> KServeReport:
    """An InferenceService manifest serving REF's Triton repository.

    Raises:
        NotGated: the gate did not pass (or is unknown) and ``allow_ungated`` is off.
        ConfigError: a name that cannot be a DNS label, or values KServe's types refuse.
        ExtraMissing: the ``kserve`` extra is not installed.
    """
    if importlib.util.find_spec("kserve") is None:  # before any work is done for nothing
        raise _kserve_missing("No module named 'kserve'")
    say = progress or (lambda message: log.info("%s", message))
    source = open_gated(
        ref,
        registry=config.registry,
        store=config.store,
        allow_ungated=config.allow_ungated,
        say=say,
    )
    model_name = config.model_name or source.name
    name = config.name or re.sub(r"[^a-z0-9-]+", "-", model_name.lower()).strip("-")
    if len(name) > 63 or not DNS_LABEL.fullmatch(name):
        raise ConfigError(
            f"{name!r} cannot name an InferenceService: it must be a DNS-1123 label (lowercase "
            "letters, digits and '-', at most 63 characters, starting and ending alphanumeric).",
            hint="Pass --name.",
            field="name",
        )
    limits = {"cpu": config.cpu, "memory": config.memory}
    if config.gpus:
        limits["nvidia.com/gpu"] = str(config.gpus)
    from onnxgate.contract import sha256_file

    parameters = {
        "name": name,
        "namespace": config.namespace,
        "annotations": {
            "onnxgate/source": source.ref,
            "onnxgate/model-sha256": sha256_file(source.model),
            "onnxgate/gate": source.gate,
        },
        "runtime": config.runtime,
        "storage_uri": config.storage_uri,
        "requests": {"cpu": config.cpu, "memory": config.memory},
        "limits": limits,
        "ready_path": f"/v2/models/{model_name}/ready",
        "port": HTTP_PORT,
        "failure_threshold": config.failure_threshold,
        "min_replicas": config.min_replicas,
        "max_replicas": config.max_replicas,
    }
    say("building the InferenceService with KServe's types")
    done = subprocess.run(
        [sys.executable, "-c", _BUILD],
        input=json.dumps(parameters),
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise InternalError(
            f"building the manifest with KServe's types failed (exit {done.returncode}): "
            f"{done.stderr.strip()[-500:]}",
            hint="Run with -vv and report it, with `pip show kserve`.",
        ) from None
    if "missing" in answer:
        raise _kserve_missing(answer["missing"])
    if "invalid" in answer:
        raise ConfigError(f"KServe's types refuse the InferenceService: {answer['invalid']}")
    import yaml  # PyYAML comes with kserve, known to be installed from here on

    manifest = answer["manifest"]
    text = yaml.safe_dump(manifest, sort_keys=False)
    written = None
    if config.out is not None:
        atomic_write_text(config.out, text)
        written = str(config.out)
    notes = [
        f"Triton runtime {config.runtime}, protocol v2, model {model_name!r} from "
        f"{config.storage_uri}; ready when /v2/models/{model_name}/ready answers (its warm-ups ran)"
    ]
    notes += _library_notes(source.model)
    return KServeReport(
        passed=True,
        source=source.ref,
        gate=source.gate,
        name=name,
        model_name=model_name,
        manifest=manifest,
        yaml=text,
        kserve=answer["kserve"],
        written=written,
        notes=notes,
    )


STORAGE_MOUNT = "/mnt/models"
"""Where KServe's storage initializer puts ``storage_uri`` and its Triton runtime reads the
repository (``--model-store=/mnt/models``)."""


def _library_notes(model: Path) -> list[str]:
    """What the pod needs for the custom operator libraries the contract requires.

    The repository ``deploy triton`` wrote carries them in the version folder, so they reach the
    pod with ``storage_uri``; ``model_operations`` must name them where the pod mounts it.
    """
    from onnxgate.contract import SIDECAR

    needs = SIDECAR.read(model).requirements.ops_libraries if SIDECAR.exists(model) else []
    if not needs:
        return []
    names = ", ".join(need.name for need in needs)
    return [
        f"the model needs the custom operator libraries {names}: the repository at the storage "
        "URI must carry them in the version folder with model_operations naming them under "
        f"{STORAGE_MOUNT} (deploy triton with {setting('repository_path', STORAGE_MOUNT)} "
        "writes it so; deploy check verifies the files)"
    ]


def _kserve_missing(detail: str) -> ExtraMissing:
    return ExtraMissing(
        "`deploy kserve` needs the 'kserve' extra: it builds the manifest with the kserve "
        f"package ({detail}).",
        extra="kserve",
    )
