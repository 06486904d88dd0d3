"""A model in ONNX Runtime's ORT format, proven against its contract and measured as an edge target.

``mobile_target`` writes what a mobile or minimal ONNX Runtime build loads (the ``.ort`` file and
``required_operators.config``, which a minimal build takes as ``--include_ops_by_config``), runs
the contract's golden samples on the ``.ort`` file and judges them with the contract's own rules
(``compare_runners`` against the ``GoldenRunner``, as ``verify`` does), then measures what an
edge budget holds: the files' sizes, the peak resident memory of a fresh worker process that
loaded the ``.ort`` file and ran the golden samples, and the single-thread p50 of each golden
sample in that worker (``perf.Contest``, one intra-op thread), with the machine watched
(``perf.Watch``). A p50 budget missed on timings other load spoiled is undecided (timed once
more first), never a failure by itself.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from onnxgate._fs import staging
from onnxgate._pathtext import shown
from onnxgate._words import setting
from onnxgate.errors import ConfigError, GateError, SessionFailed
from onnxgate.mobile._convert import Style, convert, place_converted, required_operators
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.settings import OpsLibraries, Part, SessionSettings

log = logging.getLogger(__name__)

MB = 1e6


class MobileConfig(Part):
    """How the ORT format file is made, and the edge budgets it is held to."""

    optimization_style: Style = "Fixed"
    """``Fixed``: every optimisation baked in (for the CPU provider); ``Runtime``: basic ones
    baked in, others saved to replay at load (for NNAPI or CoreML, which take nodes unknown at
    conversion time; replayed only with ``session.enable_saved_runtime_optimizations``)."""
    enable_type_reduction: bool = False
    """The operators config lists the types each operator needs, for a smaller minimal build."""
    budget: float = Field(1.0, gt=0, allow_inf_nan=False)
    """Seconds of timed single-thread runs per golden sample."""
    max_size_mb: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Fail when the ``.ort`` file is larger than this (MB, 10^6 bytes)."""
    max_peak_rss_mb: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Fail when the model's share of peak resident memory is above this (MB): the peak of the
    worker that loaded the ``.ort`` file and ran the golden samples, less its peak before it
    opened the session (the interpreter, numpy and ONNX Runtime's library, which an app's
    process holds anyway). Both figures are reported."""
    max_p50_ms: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Fail when the single-thread median latency of any golden sample is above this."""
    ops_libraries: OpsLibraries = Field((), exclude_if=lambda value: not value)
    """The custom operator library the converter, the proof and the timing worker register
    (ONNX Runtime's converter takes one); empty: the contract's, found by name on this host.
    Left out of the dump when empty, so the hashes of configs written before it stay."""


class MobileReport(BaseModel):
    """What was written, whether the ``.ort`` file holds the contract, and what it measured."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    inconclusive: bool = False
    """A p50 budget missed on timings other load spoiled: neither passed nor failed."""
    model: str
    source: str | None = None
    """The reference deployed (``deploy mobile``), when not the model file itself."""
    gate: str | None = None
    out: str
    files: list[str]
    ort_file: str
    operators_config: str
    optimization_style: Style
    type_reduction: bool
    runtime: str
    """The ONNX Runtime that converted, proved and measured it."""
    onnx_mb: float
    """The ``.onnx`` file with its external data."""
    ort_mb: float
    operators: dict[str, list[str]]
    """The config's operators by ``domain;opset``."""
    parity: str
    """The golden samples on the ``.ort`` file, judged by the contract's rules."""
    samples: int
    p50_ms: dict[str, float] = {}
    """Single-thread p50 per golden sample."""
    peak_rss_mb: float | None = None
    """The whole worker process's peak resident memory."""
    baseline_rss_mb: float | None = None
    """The same process's peak before it opened the ``.ort`` file (interpreter, ONNX Runtime)."""
    model_rss_mb: float | None = None
    """The model's share: ``peak_rss_mb - baseline_rss_mb``, what ``max_peak_rss_mb`` judges."""
    unreliable: list[str] = []
    """Why the timings cannot be trusted (other load, steal, drift); empty when they can."""
    misses: list[str] = []
    undecided: list[str] = []
    notes: list[str] = []


def _size_mb(loaded: LoadedModel) -> float:
    return (loaded.path.stat().st_size + sum(loaded.external_files.values())) / MB


def judge_budgets(
    config: MobileConfig,
    *,
    ort_mb: float,
    model_rss_mb: float | None,
    p50_ms: float | None,
    unreliable: bool,
) -> tuple[list[str], list[str]]:
    """The budgets missed, and those undecided (a p50 miss on timings load spoiled).

    Each names its setting in the words of the interface in use (``steps.mobile.max_p50_ms``
    in a gate, ``--max-p50-ms`` on the command line).
    """
    misses: list[str] = []
    undecided: list[str] = []
    if config.max_size_mb is not None and ort_mb > config.max_size_mb:
        misses.append(f".ort {ort_mb:.3f} MB > {setting('max_size_mb', config.max_size_mb)}")
    limit = config.max_peak_rss_mb
    if limit is not None and model_rss_mb is not None and model_rss_mb > limit:
        misses.append(
            f"the model's peak RSS {model_rss_mb:.1f} MB > {setting('max_peak_rss_mb', limit)}"
        )
    limit = config.max_p50_ms
    if limit is not None and p50_ms is not None and p50_ms > limit:
        text = f"single-thread p50 {p50_ms:.3f} ms > {setting('max_p50_ms', limit)}"
        (undecided if unreliable else misses).append(text)
    return misses, undecided


def mobile_target(
    model: str | Path,
    config: MobileConfig | None = None,
    *,
    out: Path,
    name: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> MobileReport:
    """Write ``model`` in the ORT format into ``out``, prove it on the goldens, measure it.

    Args:
        model: an ONNX model beside its contract.
        config: the optimisation style, type reduction and the budgets.
        out: the folder the files go to (created if missing); files of the same names in it are
            replaced, each atomically.
        name: the stem of the files written; default the model's.
        progress: called with a short message before slow steps.

    Raises:
        ModelLoadError: the model, its contract or its golden file is missing or damaged.
        HollowContract: the contract proves nothing.
        ParityError: the contract does not describe this file (its identity failed).
        SessionFailed: ONNX Runtime cannot load or convert the model (naming the node and
            operator when a static check finds why).
    """
    from onnxgate.contract import GoldenRunner, admitted, parity_summary

    config = config or MobileConfig()
    say = progress or (lambda message: log.info("%s", message))
    loaded = load_model(model)
    libraries = _libraries(loaded, config.ops_libraries)
    _refuse_unloadable(loaded, libraries)  # by node and operator, before its contract is asked for
    contract, admission = admitted(loaded)
    if libraries:
        from onnxgate.contract import SIDECAR, refuse_other_libraries

        refuse_other_libraries(contract, libraries, where=shown(SIDECAR.location(loaded.path)))
    library = _one_library(libraries, loaded)
    session = SessionSettings(ops_libraries=libraries)
    stem = name or loaded.path.stem
    say(f"converting {loaded.path.name} to the ORT format ({config.optimization_style})")
    with staging(out, "ort") as folder:
        made = convert(
            loaded,
            folder,
            name=stem,
            style=config.optimization_style,
            type_reduction=config.enable_type_reduction,
            ops_library=library,
        )
        files = place_converted(made, out, converted_in=folder)
    ort_file = next(p for p in files if p.suffix == ".ort")
    operators_file = next(p for p in files if p.suffix == ".config")

    say("running the golden samples on the .ort file")
    from onnxgate.compare import compare_runners
    from onnxgate.runners import OrtFormatRunner, runtime_version

    signature = Signature.from_graph(loaded.proto.graph)
    samples = [sample for sample, _ in admission.expected]
    produced_by = contract.golden.produced_by if contract.golden else ""
    golden = GoldenRunner(admission.expected, produced_by, signature)
    compared = compare_runners(
        OrtFormatRunner(ort_file, session),
        golden,
        samples,
        signature=signature,
        tolerances=admission.tolerances,
    )
    parity = parity_summary(compared, len(samples))

    ort_mb = ort_file.stat().st_size / MB
    notes = []
    if libraries:
        notes.append(
            f"custom operator library {libraries[0]}: registered to convert, prove and time the "
            ".ort file; the app registers it too (onnxruntime-extensions ships Android and iOS "
            "packages; a library of your own must be built for the device)"
        )
    if config.optimization_style == "Runtime":
        notes.append(
            "saved runtime optimisations are replayed only with "
            "session.enable_saved_runtime_optimizations = 1: proven and measured without them"
        )
    measured = _measure(ort_file, samples, config, say, libraries) if compared.passed else None
    p50: dict[str, float] = {}
    peak = baseline = None
    spoiled: list[str] = []
    if measured is not None:
        p50, peak, baseline, spoiled = measured
    share = round(peak - baseline, 1) if peak is not None and baseline is not None else None
    misses, undecided = judge_budgets(
        config,
        ort_mb=ort_mb,
        model_rss_mb=share,
        p50_ms=max(p50.values(), default=None),
        unreliable=bool(spoiled),
    )
    if not compared.passed:
        misses.insert(0, f"the .ort file breaks the contract: {parity}")
    return MobileReport(
        passed=not misses and not undecided,
        inconclusive=not misses and bool(undecided),
        model=shown(loaded.path),
        out=shown(out),
        files=[p.name for p in files],
        ort_file=shown(ort_file),
        operators_config=shown(operators_file),
        optimization_style=config.optimization_style,
        type_reduction=config.enable_type_reduction,
        runtime=f"onnxruntime {runtime_version()}",
        onnx_mb=round(_size_mb(loaded), 6),
        ort_mb=round(ort_mb, 6),
        operators=required_operators(operators_file),
        parity=parity,
        samples=len(samples),
        p50_ms=p50,
        peak_rss_mb=peak,
        baseline_rss_mb=baseline,
        model_rss_mb=share,
        unreliable=spoiled,
        misses=misses,
        undecided=undecided,
        notes=notes,
    )


def _libraries(loaded: LoadedModel, given: tuple[str, ...]) -> tuple[str, ...]:
    """The custom operator libraries to register: ``given``, else the contract's by name.

    Raises:
        ConfigError: the contract records a library file that was not given.
    """
    from onnxgate.contract import SIDECAR, host_libraries

    if given or not SIDECAR.exists(loaded.path):
        return given
    try:
        contract = SIDECAR.read(loaded.path)
    except GateError:  # the contract's own refusal comes with admitting it
        return ()
    return host_libraries(contract, (), where=shown(SIDECAR.location(loaded.path)))


def _one_library(libraries: tuple[str, ...], loaded: LoadedModel) -> Path | None:
    """The file of the one library ONNX Runtime's converter registers (``--custom_op_library``).

    Raises:
        ConfigError: more than one library: the converter takes one.
    """
    from onnxgate._opslib import resolve_ops_library

    if not libraries:
        return None
    if len(libraries) > 1:
        raise ConfigError(
            f"{shown(loaded.path)} needs the custom operator libraries {', '.join(libraries)}; "
            "ONNX Runtime's converter to the ORT format registers one "
            "(--custom_op_library), so the .ort file cannot be made with all of them.",
            hint="Build the custom operators into one library, and give that one with "
            f"{setting('ops_libraries', ['PATH'])}.",
            field="ops_libraries",
        )
    return resolve_ops_library(libraries[0]).path


def _refuse_unloadable(loaded: LoadedModel, libraries: tuple[str, ...] = ()) -> None:
    """Refuse, by node and operator, a model the installed ONNX Runtime will not load.

    ``libraries``: the custom operator libraries registered, whose operators load.

    Raises:
        SessionFailed: ``check`` finds what blocks loading (a custom domain's operator, say).
    """
    from onnxgate.check import CheckConfig, check_model

    try:
        report = check_model(loaded, CheckConfig(ops_libraries=libraries))
    except GateError:  # the converter's own refusal will say why
        return
    blocking = [f for f in report.findings if f.blocks_load]
    if blocking:
        shown_ = "; ".join(f"{f.code} {f.message}" for f in blocking[:5])
        raise SessionFailed(
            f"{shown(loaded.path)}: ONNX Runtime cannot load it, so there is no ORT format to "
            f"write: {shown_}",
            hint="The ORT format holds only what ONNX Runtime loads: fix what `onnxgate check` "
            "finds (a custom domain's operator needs the library that implements it, "
            f"{setting('ops_libraries', ['PATH'])}; or replace or remove those nodes).",
        )


def _measure(
    ort_file: Path,
    samples: list[Any],
    config: MobileConfig,
    say: Callable[[str], None],
    libraries: tuple[str, ...] = (),
) -> tuple[dict[str, float], float, float, list[str]]:
    """Single-thread p50 per sample, peak and baseline RSS (MB), and why timings are unreliable.

    One fresh worker loads the ``.ort`` file with one intra-op thread and runs every golden
    sample; timed again once when other load spoiled a p50 that a budget judges.
    """
    from onnxgate.perf import Contender, Contest, Watch

    settings: dict[str, Any] = {"intra_op_threads": 1, "inter_op_threads": 1}
    if libraries:
        settings["ops_libraries"] = list(libraries)
    contender = Contender(label=ort_file.name, onnx=ort_file, settings=settings)
    for attempt in (1, 2):
        p50: dict[str, float] = {}
        runs: dict[str, list[float]] = {}
        with Contest([contender]) as contest:
            before = contest.loaded[0].get("peak_rss_kb_before")
            watch = Watch(lambda contest=contest: contest.pids)
            for sample in samples:
                say(f"timing {sample.label} on one thread")
                timed = contest.race([sample.feeds], warmup=5, budget_s=config.budget)[0]
                runs[sample.label] = timed
                p50[sample.label] = round(statistics.median(timed), 4)
            conditions = watch.conditions(runs)
            peak = contest.memory()[0] * 1024 / MB  # KiB to MB
        spoiled = list(conditions.reasons)
        judged = config.max_p50_ms is not None and max(p50.values()) > config.max_p50_ms
        if not (spoiled and judged) or attempt == 2:
            break
        say("the machine was busy while timing; timing again")
    baseline = before * 1024 / MB if before else 0.0
    return p50, round(peak, 1), round(baseline, 1), spoiled
