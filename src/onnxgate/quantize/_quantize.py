"""``quantize()``: an int8 model inside a stated accuracy budget on real data, or a clear no.

Every input is checked before ONNX Runtime is asked to do anything (the model is float and holds
something to quantise, the data fit the model, the two data sets are different), so a bad input is
an error with nothing written. The model is pre-processed, quantised with every candidate in int8
and judged on the evaluation data; when it misses the budget the search keeps the worst nodes in
float. Only a model that meets the budget is written, atomically, with a contract that names its
parent and the gate it passed.
"""

from __future__ import annotations

import logging
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import onnx

from onnxgate._fs import atomic_write_bytes, atomic_write_text
from onnxgate._version import __version__
from onnxgate.contract import Provenance, contract_paths, load_contract, write_contract
from onnxgate.contract._schema import sha256_file
from onnxgate.data import Sample, synthetic_samples
from onnxgate.errors import ConfigError, GateError
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.quantize import _data
from onnxgate.quantize._config import QuantizeConfig, Settings, cpu_features, resolve
from onnxgate.quantize._gate import Judge, gate_rules
from onnxgate.quantize._ort import (
    candidates,
    preprocess,
    quantise,
    quantised_nodes,
    refuse_unquantisable,
)
from onnxgate.quantize._report import Attempt, DataInfo, Latency, NodeScore, QuantizeReport
from onnxgate.quantize._search import naive, search

log = logging.getLogger(__name__)

GOLDEN_SAMPLES = 4
"""Evaluation samples kept as the quantised model's golden samples."""


def _ops(proto: onnx.ModelProto) -> dict[str, int]:
    return dict(Counter(n.op_type for n in proto.graph.node).most_common())


def _left_in_float(proto: onnx.ModelProto, settings: Settings) -> dict[str, int]:
    """Nodes of the quantisable op types that read no dequantised value (they compute in float)."""
    dequantised = {o for n in proto.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    left = Counter(
        n.op_type
        for n in proto.graph.node
        if n.op_type in settings.op_types and not any(i in dequantised for i in n.input)
    )
    return dict(left.most_common())


def _ort_version() -> str:
    try:
        return version("onnxruntime")
    except PackageNotFoundError:
        return "unknown"


def _bench_plan(
    loaded: LoadedModel, signature: Signature, config: QuantizeConfig, sample: Sample
) -> tuple[list[int], dict[str, list[int]]]:
    """Batch sizes and other dims to time.

    Batches given, else the parent contract's batch bounds, else 1 and the evaluation batch;
    other symbolic dims at the evaluation data's sizes.
    """
    from onnxgate.perf import batch_dim

    dims = _data.sample_dims(signature, sample)
    name = batch_dim(signature)
    batches = list(config.bench_batches)
    if not batches and name is not None:
        contract_file = contract_paths(loaded.path)[0]
        if contract_file.is_file():
            try:
                bound = load_contract(loaded.path).signature.dims.get(name)
            except GateError:
                bound = None
            if bound is not None and bound.min is not None and bound.max is not None:
                batches = sorted({bound.min, bound.max})
        if not batches:
            batches = sorted({1, dims.get(name, 1)})
    others = {k: [v] for k, v in dims.items() if k != name}
    return (batches if name is not None else []), others


def _latency(
    paths: dict[str, Path | None],
    batches: list[int],
    dims: dict[str, list[int]],
    budget: float,
    progress: Callable[[str], None],
) -> tuple[list[Latency], list[str]]:
    from onnxgate.perf import BenchConfig, bench

    config = BenchConfig(batches=batches, dims=dims, budget_s=budget, warmup=3, min_runs=5)
    results = {}
    warnings: list[str] = []
    for label, path in paths.items():
        if path is None:
            continue
        progress(f"timing the {label} model")
        try:
            results[label] = bench(path, config).results
        except GateError as err:
            warnings.append(f"latency of the {label} model not measured: {err.message}")
            return [], warnings
    rows = []
    for index, base in enumerate(results.get("float", [])):
        quant = results["quantised"][index]
        naive_ms = results["all-int8"][index].p50_ms if "all-int8" in results else None
        rows.append(
            Latency(
                dims=base.dims,
                float_ms=base.p50_ms,
                quantized_ms=quant.p50_ms,
                speedup=base.p50_ms / quant.p50_ms if quant.p50_ms > 0 else 0.0,
                all_int8_ms=naive_ms,
                noisy=base.noisy or quant.noisy,
            )
        )
    if any(r.noisy for r in rows):
        warnings.append("some latencies vary by more than 10% (CV): the machine is busy")
    return rows, warnings


def quantize(
    model: str | Path,
    config: QuantizeConfig,
    *,
    progress: Callable[[str], None] | None = None,
) -> QuantizeReport:
    """Quantise a float model to int8 inside the accuracy budget; write it only if it is inside.

    Args:
        model: the float ``.onnx`` model.
        config: how to quantise, on which data, within which budget.
        progress: called with a short message before each step.

    Returns:
        The report; ``passed`` is False (and nothing is written) when the budget was missed.

    Raises:
        ModelLoadError: the model cannot be read.
        ConfigError: contradicting options, a quantised model, or nothing to quantise.
        FeedError: calibration or evaluation data that do not fit the model.
        RunFailed: ONNX Runtime failed to quantise or run a model.
    """
    say = progress or (lambda message: log.info("%s", message))
    features = cpu_features()
    settings, notices = resolve(config, features)
    loaded = load_model(model, load_weights=True)
    out = Path(config.out)
    if out.is_dir():
        raise ConfigError(f"--out {out} is a folder; name the .onnx file to write.")
    if out.resolve() == loaded.path.resolve():
        raise ConfigError(f"--out {out} is the model itself; write the quantised model elsewhere.")
    signature = Signature.from_graph(loaded.proto.graph)
    refuse_unquantisable(loaded.proto, settings, str(loaded.path))
    _data.check_distinct(config.calibration, config.eval)
    warnings: list[str] = []
    calibration: list[Sample] = []
    calibration_info = None
    if settings.mode == "static":
        assert config.calibration is not None  # resolve() refused static without it
        say("reading the calibration data")
        calibration = _data.load_samples(config.calibration, signature, option="--calibration")
        calibration_info = DataInfo(
            source=config.calibration,
            samples=len(calibration),
            rows=sum(_data.rows(s) for s in calibration),
        )
    if config.eval is not None:
        say("reading the evaluation data")
        evaluation = _data.load_samples(config.eval, signature, option="--eval")
        eval_source = config.eval
    else:
        evaluation = synthetic_samples(signature, model=loaded.proto, seed=config.seed)
        eval_source = f"synthetic (seed {config.seed})"
        warnings.append(
            "no --eval data: the gate ran on synthetic inputs, which say little about accuracy "
            "on real data"
        )
    eval_rows = sum(_data.rows(s) for s in evaluation)
    labels = _data.load_labels(config.labels, eval_rows) if config.labels is not None else None
    overlap_rows = _data.overlap(calibration, evaluation) if calibration else 0
    if overlap_rows:
        warnings.append(
            f"{overlap_rows} of {eval_rows} evaluation row(s) also appear in the calibration "
            "data: the accuracy measured on them flatters the model"
        )
    rules, gate_notices = gate_rules(loaded.proto, signature, config, labels is not None)
    notices += gate_notices
    with tempfile.TemporaryDirectory(prefix="onnxgate-quantize-") as folder:
        tmp = Path(folder)
        source = tmp / "float.onnx"
        onnx.save(loaded.proto, str(source))
        say("pre-processing (ONNX Runtime's quant_pre_process)")
        pre = tmp / "pre.onnx"
        notices += preprocess(source, pre)
        nodes = candidates(onnx.load(str(pre), load_external_data=False), settings)
        say(f"running the float model on {len(evaluation)} evaluation sample(s)")
        judge = Judge(source, signature, evaluation, rules, max_drop=config.max_drop, labels=labels)
        cache = tmp / "calibration.json" if settings.mode == "static" else None

        def make(exclude: Sequence[str], only: Sequence[str] | None) -> Path:
            target = tmp / "candidate.onnx"
            quantise(
                pre,
                target,
                settings,
                exclude=exclude,
                only=only,
                calibration=calibration,
                cache=cache,
            )
            return target

        def keep(path: Path, count: int) -> Path:
            return path.rename(tmp / f"pass-{count}.onnx")

        say(f"quantising {len(nodes)} node(s) to int8")
        first_path, first = naive(make, judge.judge)
        all_int8 = first_path.rename(tmp / "all-int8.onnx")
        if quantised_nodes(onnx.load(str(all_int8), load_external_data=False)) == 0:
            raise ConfigError(
                f"{loaded.path}: ONNX Runtime quantised none of its "
                f"{'/'.join(settings.op_types)} nodes.",
                hint="Check --op-types; dynamic quantisation needs constant weights.",
            )
        attempts: list[Attempt] = [first]
        ranking: list[NodeScore] = []
        best: tuple[Path, list[str]] | None = (all_int8, []) if first.passed else None
        reason = None
        if not first.passed and config.search and len(nodes) > 1:
            found = search(
                nodes,
                make,
                judge.judge,
                max_excluded=min(config.max_excluded or len(nodes) - 1, len(nodes) - 1),
                progress=say,
                keep=keep,
            )
            attempts += found.attempts
            ranking = found.ranking
            best = found.best
            if best is None:
                limit = min(config.max_excluded or len(nodes) - 1, len(nodes) - 1)
                reason = (
                    f"the budget cannot be met: with the {limit} worst of {len(nodes)} node(s) "
                    "kept in float (at least one must stay int8) it is still missed"
                )
        elif not first.passed:
            reason = "the budget was missed with every node in int8" + (
                " and the search is off (--no-search)" if not config.search else ""
            )
        # the delivered model, or the last one judged (the search's last attempt, if any)
        last = tmp / "candidate.onnx"
        shown = best[0] if best else last if last.exists() else all_int8
        excluded_names = best[1] if best else attempts[-1].excluded
        scores = {s.node: s for s in ranking}
        excluded = [
            scores.get(n) or NodeScore(node=n, op_type="", score=0.0) for n in excluded_names
        ]
        shown_proto = onnx.load(str(shown), load_external_data=False)
        latency: list[Latency] = []
        if config.bench and best is not None:
            batches, dims = _bench_plan(loaded, signature, config, evaluation[0])
            latency, bench_warnings = _latency(
                {
                    "float": source,
                    "quantised": shown,
                    "all-int8": all_int8 if excluded_names else None,
                },
                batches,
                dims,
                config.bench_budget_s,
                say,
            )
            warnings += bench_warnings
        report = QuantizeReport(
            passed=best is not None,
            model=str(loaded.path),
            out=str(out) if best is not None else None,
            settings=settings,
            cpu_features=features,
            notices=notices,
            warnings=warnings,
            calibration=calibration_info,
            evaluation=DataInfo(source=eval_source, samples=len(evaluation), rows=eval_rows),
            overlap_rows=overlap_rows,
            max_drop=config.max_drop,
            gate=(
                next(a for a in attempts if a.excluded == excluded_names and a.passed).figures
                if best
                else attempts[-1].figures
            ),
            attempts=attempts,
            ranking=ranking,
            excluded=excluded,
            quantized_nodes=quantised_nodes(shown_proto),
            float_ops=_left_in_float(shown_proto, settings),
            size_before=loaded.size_bytes,
            size_after=shown.stat().st_size,
            ops_before=_ops(loaded.proto),
            ops_after=_ops(shown_proto),
            latency=latency,
            reason=reason,
        )
        if best is None:
            return report
        say(f"writing {out}")
        atomic_write_bytes(out, shown.read_bytes())
    if not config.contract:
        return report
    return report.model_copy(
        update={"contract": str(_write_contract(out, loaded, judge, evaluation, report))}
    )


def _write_contract(
    out: Path, parent: LoadedModel, judge: Judge, evaluation: list[Sample], report: QuantizeReport
) -> Path:
    """The quantised model's contract, with its lineage.

    Golden samples are the float parent's outputs, judged by the gate's rules; the lineage names
    the parent and the gate result.
    """
    written = load_model(out)
    contract = write_contract(
        written,
        judge.reference,
        evaluation[:GOLDEN_SAMPLES],
        provenance=Provenance(
            exporter=f"onnxruntime.quantization {_ort_version()}",
            options=report.settings.model_dump(mode="json"),
            onnxgate=__version__,
        ),
        config=judge.config(),
        force=True,
    )
    parent_contract = contract_paths(parent.path)[0]
    lineage = {
        "step": "quantize",
        "parent": {
            "model": str(parent.path),
            "sha256": sha256_file(parent.path),
            "contract": str(parent_contract) if parent_contract.is_file() else None,
        },
        "settings": report.settings.model_dump(mode="json"),
        "excluded_nodes": [s.node for s in report.excluded],
        "calibration": report.calibration.model_dump(mode="json") if report.calibration else None,
        "gate": {
            "passed": report.passed,
            "max_drop": report.max_drop,
            "evaluation": report.evaluation.model_dump(mode="json"),
            "overlap_rows": report.overlap_rows,
            "figures": [f.model_dump(mode="json") for f in report.gate],
        },
    }
    path = contract_paths(out)[0]
    updated = contract.model_copy(update={"lineage": lineage})
    atomic_write_text(path, updated.model_dump_json(indent=2) + "\n")
    return path
