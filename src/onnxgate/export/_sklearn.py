"""Export a scikit-learn estimator with skl2onnx, proved on the user's data.

Choices made here, and stated in the result: ZipMap is off, so probabilities are a [rows, classes]
tensor rather than a list of dicts; inputs are float32 unless float64 is asked for (ONNX Runtime's
ML operators compute in float32, and a float64 model loads only where every operator has a double
kernel); the opset is the highest that both skl2onnx and the target runtime support. Parity is
checked on the data given: labels must be equal, probabilities within tolerance.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from onnxgate._fs import staged_file
from onnxgate._pathtext import FilePath, shown
from onnxgate._version import __version__
from onnxgate._words import setting
from onnxgate.compare import compare_runners
from onnxgate.compat.runtime import RuntimeSpec, runtime_profile
from onnxgate.contract import (
    Provenance,
    drop_stale_contract,
    opinion_from,
    write_contract,
)
from onnxgate.data import DimRange, Sample, read_arrays
from onnxgate.errors import ExportError, ExtraMissing, FeedError
from onnxgate.export._report import ExportReport, export_lineage
from onnxgate.model import Signature, load_model
from onnxgate.runners import SklearnRunner, load_estimator
from onnxgate.settings import OpsLibraries, Part, SessionSettings, Tolerances


class SklearnExportConfig(Part):
    """What ``export sklearn`` is asked to do with an estimator."""

    out: FilePath
    """The ``.onnx`` file to write."""
    data: FilePath
    """Rows to prove parity on: an .npy matrix, or an .npz with one array (or ``X``)."""
    dtype: Literal["float32", "float64"] = "float32"
    """The inputs' element type."""
    opset: int | None = Field(None, ge=1)
    runtime: str | None = None
    """Target ONNX Runtime release: the opset and IR are the highest it loads."""
    tolerances: Tolerances = Tolerances()
    """Tolerances and metrics of the parity check, recorded in the contract."""
    batch: tuple[int, int] | None = None
    """The serving range of the batch, ``(min, max)`` (``[feeds] dims.batch``); default 1 to
    the data's row count. Proven at both ends and between; rows are repeated past the data's."""
    golden_rows: int | None = Field(None, ge=1)
    """The most rows one golden sample keeps (default: the top of ``batch``)."""

    @field_validator("batch")
    @classmethod
    def _batch(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is not None and not 1 <= value[0] <= value[1]:
            raise ValueError(f"{list(value)} is not [MIN, MAX] with 1 <= MIN <= MAX")
        return value

    contract: bool = True
    """Write the contract and golden samples beside the model."""
    ops_libraries: OpsLibraries = ()
    """Custom operator libraries the parity check's ONNX Runtime session registers (for a model
    exported with custom-domain operators); the contract records them."""


class _Missed(Exception):
    """Leaves the staged file unwritten: the export did not pass."""

    def __init__(self, report: ExportReport) -> None:
        super().__init__(report.reason)
        self.report = report


def read_matrix(path: Path) -> np.ndarray:
    """A 2-D feature matrix from .npy or .npz (told apart by content, as ``np.load`` does).

    Raises:
        FeedError: the file is missing, unreadable, or not one 2-D numeric matrix.
    """
    loaded = read_arrays(path)
    if isinstance(loaded, np.ndarray):
        matrix = loaded
    else:
        names = list(loaded)
        key = "X" if "X" in names else names[0] if len(names) == 1 else None
        if key is None:
            raise FeedError(f"{shown(path)}: holds {names}; name the feature matrix X.")
        matrix = loaded[key]
    if matrix.ndim != 2 or matrix.dtype.kind not in "fiub":
        raise FeedError(
            f"{shown(path)}: expected a 2-D numeric matrix; got {matrix.dtype} "
            f"{list(matrix.shape)}."
        )
    if len(matrix) == 0:
        raise FeedError(f"{shown(path)}: has no rows.")
    return matrix


def _golden_rows(x: np.ndarray, name: str, config: SklearnExportConfig) -> list[Sample]:
    """Golden samples at the ends of the batch's range and between: the sizes it will serve.

    By default 1 to every row of the data, so a pipeline given 171 rows is proven at 171.
    """
    low, high = config.batch or (1, len(x))
    high = min(high, config.golden_rows or high)
    low = min(low, high)
    between = DimRange(low, high, "batch", "").between
    golden = []
    for n in sorted({low, between, high}):
        rows = x[np.arange(n) % len(x)]  # past the data's rows, they repeat
        what = f"[:{n}]" if n <= len(x) else f" repeated to {n} rows"
        golden.append(Sample(f"{shown(config.data.name)}{what}", {name: rows}, {"batch": n}))
    return golden


def _skl2onnx() -> Any:
    try:
        import skl2onnx
    except ImportError as err:
        raise ExtraMissing(
            "exporting scikit-learn models needs the 'sklearn' extra "
            f"({err.name or 'skl2onnx'} is not installed).",
            extra="sklearn",
        ) from err
    return skl2onnx


def _name_batch(proto: Any) -> None:
    """Call the unnamed first dimension of inputs and outputs ``batch``, as a contract reads it."""
    for value in [*proto.graph.input, *proto.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].dim_param and not dims[0].HasField("dim_value"):
            dims[0].dim_param = "batch"


def _dedupe_opsets(proto: Any) -> None:
    """skl2onnx may import a domain twice; keep the highest version once."""
    best: dict[str, int] = {}
    for entry in proto.opset_import:
        best[entry.domain] = max(best.get(entry.domain, 0), entry.version)
    del proto.opset_import[:]
    for domain, version in best.items():
        entry = proto.opset_import.add()
        entry.domain, entry.version = domain, version


def _notices(config: SklearnExportConfig) -> list[str]:
    """The choices this export makes, stated in its report."""
    return [
        f"inputs are {config.dtype}"
        + (
            " (skl2onnx's default; ONNX Runtime's ML operators compute in float32)"
            if config.dtype == "float32"
            else " (double precision; some ML operators have no double kernel)"
        ),
        "ZipMap is off: probabilities are a [rows, classes] tensor",
    ]


def _read_rows(estimator: Any, config: SklearnExportConfig) -> np.ndarray:
    """The data as a matrix of ``config.dtype``, refused if its columns are not the features."""
    x = read_matrix(config.data).astype(config.dtype)
    expected = getattr(estimator, "n_features_in_", None)
    if expected is not None and x.shape[1] != expected:
        raise FeedError(
            f"{shown(config.data)}: has {x.shape[1]} column(s); {type(estimator).__name__} was "
            f"fitted on {expected} feature(s)."
        )
    return x


def _opset_for(
    skl2onnx: Any, config: SklearnExportConfig, notices: list[str]
) -> tuple[int, dict[str, int], int | None]:
    """The opset, the target opsets per domain, and the highest IR for ``config.runtime``."""
    opset = config.opset or skl2onnx.__max_supported_opset__
    ml = None
    max_ir = None
    if config.runtime:
        profile = runtime_profile(RuntimeSpec.parse(config.runtime))
        opset = min(opset, profile.max_opsets.get("ai.onnx", opset))
        ml = profile.max_opsets.get("ai.onnx.ml")
        max_ir = profile.max_ir
        notices.append(f"{profile.label} loads ai.onnx {opset}, ai.onnx.ml {ml}: exported at those")
    opset = min(opset, skl2onnx.__max_supported_opset__)
    target = {"": opset} | ({"ai.onnx.ml": ml} if ml else {})
    return opset, target, max_ir


def _convert(
    skl2onnx: Any, estimator: Any, x: np.ndarray, target: dict[str, int], max_ir: int | None
) -> Any:
    """The estimator as an ONNX proto: opsets deduplicated, batch named, IR stamped down."""
    from sklearn.base import is_classifier

    try:
        options = {"zipmap": False} if is_classifier(estimator) else None
        proto = skl2onnx.to_onnx(estimator, x[:1], options=options, target_opset=target)
    except Exception as err:  # skl2onnx raises many unrelated types
        raise ExportError(
            f"skl2onnx cannot convert {type(estimator).__name__}: {type(err).__name__}: {err}",
            hint="Check skl2onnx's list of supported estimators; a custom step needs a registered "
            "converter (skl2onnx.update_registered_converter).",
        ) from err
    _dedupe_opsets(proto)
    _name_batch(proto)
    if max_ir is not None:
        proto.ir_version = min(proto.ir_version, max_ir)
    return proto


def _why_missed(estimator: Any, config: SklearnExportConfig, report: Any) -> dict[str, str]:
    """The reason and hint of a failed parity check, as a report update."""
    detail = "; ".join(f"{o.name}: {o.reason}" for o in report.outputs if not o.passed)
    reason = (
        f"the exported model disagrees with {type(estimator).__name__} on "
        f"{shown(config.data)}: {detail}. The model was not written to "
        f"{shown(config.out)}."
    )
    looser = setting("tolerances.per_output", {"probabilities": (0.05, 0)})
    hint = (
        "ONNX Runtime's tree ensembles compare features with float32 thresholds: a "
        "value computed in float64 by scikit-learn (a scaler before a forest) can fall "
        "on the other side of a split and flip a tree. Labels may still agree; if they "
        f"are what matters, judge probabilities by a looser rule ({looser})."
        if re.search(r"Tree|Forest|Boost", repr(estimator))
        else f"Compare in float64 ({setting('dtype', 'float64')}) to see whether "
        "precision explains it."
    )
    return {"reason": reason, "hint": hint}


def _provenance(skl2onnx: Any, config: SklearnExportConfig, opset: int) -> Provenance:
    """How the exported model was made, for its contract."""
    import sklearn

    return Provenance(
        framework=f"scikit-learn {sklearn.__version__}",
        exporter=f"skl2onnx {skl2onnx.__version__}",
        options={
            "opset": opset,
            "dtype": config.dtype,
            "zipmap": False,
            "runtime": config.runtime,
        },
        onnxgate=__version__,
        lineage=export_lineage(config),
    )


def _batch_why(x: np.ndarray, config: SklearnExportConfig) -> str:
    """Why the golden samples have the batch sizes they have."""
    why = "[feeds] dims" if config.batch else "1 to every row of the data given"
    if config.golden_rows is not None and config.golden_rows < (config.batch or (1, len(x)))[1]:
        why += f", at most golden_rows {config.golden_rows}"
    return why


def export_sklearn(
    estimator: Any,
    config: SklearnExportConfig,
    *,
    trust_pickle: bool = False,
    progress: Callable[[str], None] | None = None,
) -> ExportReport:
    """Convert an estimator (an object, or a joblib/pickle path) and prove it on ``config.data``.

    Returns:
        The report; ``passed`` is False when labels differ or probabilities are outside
        tolerance (``reason`` says which), and then nothing is written.

    Raises:
        ConfigError: a pickle without ``trust_pickle``, or a bad option.
        ExportError: skl2onnx cannot convert the estimator.
    """
    skl2onnx = _skl2onnx()
    import onnx

    say = progress or (lambda message: None)
    if isinstance(estimator, str | os.PathLike):
        estimator = load_estimator(estimator, trust_pickle=trust_pickle)
    notices = _notices(config)
    x = _read_rows(estimator, config)
    opset, target, max_ir = _opset_for(skl2onnx, config, notices)
    say(f"converting {type(estimator).__name__} with skl2onnx at opset {opset}")
    proto = _convert(skl2onnx, estimator, x, target, max_ir)
    try:
        with staged_file(config.out) as tmp:
            onnx.save_model(proto, str(tmp))
            loaded = load_model(tmp)
            signature = Signature.from_graph(loaded.proto.graph)
            name = signature.inputs[0].name
            say(f"checking parity on {len(x)} rows")
            reference = SklearnRunner.from_estimator(
                estimator, signature, name=type(estimator).__name__
            )
            from onnxgate.runners import open_runner

            report = compare_runners(
                open_runner(loaded, SessionSettings(ops_libraries=config.ops_libraries)),
                reference,
                [Sample(shown(config.data.name), {name: x})],
                signature=signature,
                tolerances=config.tolerances,
            )
            result = ExportReport(
                passed=report.passed,
                source=type(estimator).__name__,
                path=config.out,
                exporter="skl2onnx",
                opset=opset,
                ir_version=loaded.proto.ir_version,
                dtype=config.dtype,
                parity=report,
                notices=notices,
            )
            if not report.passed:
                raise _Missed(result.model_copy(update=_why_missed(estimator, config, report)))
    except _Missed as missed:
        return missed.report
    final = load_model(config.out)
    contract = None
    if not config.contract:
        notices.extend(drop_stale_contract(config.out))
    if config.contract:
        contract = write_contract(
            final,
            SklearnRunner.from_estimator(estimator, signature, name=type(estimator).__name__),
            _golden_rows(x, name, config),
            provenance=_provenance(skl2onnx, config, opset),
            config=config.tolerances,
            force=True,
            second_opinion=opinion_from(report, what="the export's parity check on every row"),
            ops_libraries=config.ops_libraries,
            dims_why={"batch": _batch_why(x, config)},
        )
    return result.model_copy(update={"contract": contract, "notices": notices})
