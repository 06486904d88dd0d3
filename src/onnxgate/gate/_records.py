"""The gate's steps, one ``StepRecord`` each, in the order they run.

``ORDER``, ``NEEDS``, ``RUNNERS`` (the pipeline's) and ``DETAIL`` (the page's) are read from
``RECORDS``; a new step is one record here, its table in ``_config``, its runner in ``_steps``
and its renderer in ``_details``.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from onnxgate.check import CheckConfig
from onnxgate.compare import CompareConfig
from onnxgate.contract import ContractConfig, VerifyConfig
from onnxgate.contract_store import contract_paths
from onnxgate.errors import GateError
from onnxgate.gate import _details, _steps
from onnxgate.gate._config import (
    BenchStep,
    CheckStep,
    CompareStep,
    ExportStep,
    MobileStep,
    PlacementStep,
    QuantizeStep,
    TuneStep,
    VerifyStep,
    WebStep,
)
from onnxgate.gate._record import StepRecord, register
from onnxgate.mobile import MobileConfig
from onnxgate.perf import BenchConfig, TuneConfig
from onnxgate.placement import PlacementConfig
from onnxgate.quantize import QuantizeConfig
from onnxgate.web import WebOptions


def _model_files(model: Path) -> list[Path]:
    """A model, its external data, its contract and its golden samples (those that exist)."""
    if not model.is_file():
        return []
    from onnxgate.model import load_model  # its external data, checked as safe

    try:
        refs = load_model(model).external_data
    except (GateError, OSError):  # a model the step failed on: its own error says why
        refs = []
    # only the location is normalised: the run folder keeps its own spelling (``../runs``)
    data = [model.parent / os.path.normpath(ref.location) for ref in refs]
    return [model, *data, *contract_paths(model)]


def _exported(run_dir: Path, name: str) -> list[Path]:
    return _model_files(run_dir / f"{name}.onnx")


QUANTIZE_FORMATS = get_args(QuantizeStep.model_fields["to"].annotation)
"""The formats ``[steps.quantize] to`` takes, each its own file name."""


def _quantized(run_dir: Path, name: str) -> list[Path]:
    """Files of each format quantize writes (``NAME.int8.onnx``, ``NAME.fp16.onnx``).

    Those the step changed are its artefacts; a stale one of another format is left unrecorded.
    """
    return [f for to in QUANTIZE_FORMATS for f in _model_files(run_dir / f"{name}.{to}.onnx")]


def _tuned(run_dir: Path, name: str) -> list[Path]:
    """The contract, with the tuned record, and the rewritten graph it names (if any)."""
    model = run_dir / f"{name}.onnx"
    graphs = run_dir.glob(f"{glob.escape(name)}.tuned-*.onnx")
    return [contract_paths(model)[0], *graphs]


def _mobile(run_dir: Path, name: str) -> list[Path]:
    """The ORT format files and their operators config (names by style and type reduction)."""
    stem = glob.escape(name)
    return [*run_dir.glob(f"{stem}*.ort"), *run_dir.glob(f"{stem}.required_operators*.config")]


def _web(run_dir: Path, name: str) -> list[Path]:
    """The web app's files, in ``web/`` (the model, its input spec, its proof)."""
    folder = run_dir / "web"
    stem = glob.escape(name)
    return [
        *folder.glob(f"{stem}.onnx"),
        *folder.glob(f"{stem}.ort"),
        *folder.glob(f"{stem}.required_operators.config"),
        *folder.glob(f"{stem}.inputs.json"),
        *folder.glob(f"{stem}.proof.json"),
    ]


RECORDS: tuple[StepRecord, ...] = (
    StepRecord(
        "export",
        ExportStep,
        ContractConfig,
        _steps.export,
        _details.export,
        produces=_exported,
        owned=("force", "batch_axis", "session"),
    ),
    StepRecord(
        "check",
        CheckStep,
        CheckConfig,
        _steps.check,
        _details.check,
        needs=("export",),
        owned=("runtime", "providers", "observed_outputs", "ops_libraries"),
    ),
    StepRecord(
        "compare",
        CompareStep,
        CompareConfig,
        _steps.compare,
        _details.compare,
        needs=("export",),
    ),
    StepRecord(
        "verify",
        VerifyStep,
        VerifyConfig,
        _steps.verify,
        _details.verify,
        needs=("export",),
        owned=("session",),
    ),
    StepRecord(
        "placement",
        PlacementStep,
        PlacementConfig,
        _steps.placement,
        _details.placement,
        needs=("export",),
        owned=("session",),
    ),
    StepRecord(
        "tune",
        TuneStep,
        TuneConfig,
        _steps.tune,
        _details.tune,
        needs=("export", "verify"),
        produces=_tuned,
        owned=("feeds", "providers", "ops_libraries"),
        gate_only=("dims",),
    ),
    StepRecord(
        "quantize",
        QuantizeStep,
        QuantizeConfig,
        _steps.quantize,
        _details.quantize,
        needs=("export", "verify"),
        produces=_quantized,
        owned=("out", "second_opinion", "ops_libraries"),
        gate_only=("required",),
        renamed={"bench_budget": "bench_budget_s"},
    ),
    StepRecord(
        "bench",
        BenchStep,
        BenchConfig,
        _steps.bench,
        _details.bench,
        needs=("export",),
        owned=("feeds",),
        gate_only=(
            "dims",
            "runtimes",
            "max_p50_ms",
            "max_p99_ms",
            "min_speedup",
            "max_size_mb",
            "on_unreliable",
        ),
    ),
    StepRecord(
        "mobile",
        MobileStep,
        MobileConfig,
        _steps.mobile,
        _details.mobile,
        needs=("export",),
        produces=_mobile,
        owned=("ops_libraries",),
        gate_only=("on_unreliable",),
    ),
    StepRecord(
        "web",
        WebStep,
        WebOptions,
        _steps.web,
        _details.web,
        needs=("export",),
        produces=_web,
    ),
)
"""Every step, in the order the gate runs them."""

BY_NAME: dict[str, StepRecord] = {record.name: record for record in RECORDS}

ORDER: tuple[str, ...] = tuple(BY_NAME)
NEEDS: dict[str, tuple[str, ...]] = {record.name: record.needs for record in RECORDS}
"""The steps whose artefacts a step reads; it does not run unless they passed (or are disabled,
which only ``verify`` may be: ``export`` always runs). An inconclusive step counts as passed for
what follows when its ``on_unreliable`` is ``warn``: its artefacts are sound, only a speed figure
is unproven."""
RUNNERS: dict[str, Callable[..., Any]] = {record.name: record.run for record in RECORDS}
DETAIL: dict[str, Callable[..., str]] = {record.name: record.detail for record in RECORDS}

register(*RECORDS)
