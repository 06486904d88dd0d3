"""``quantize()``: an int8 model inside a stated accuracy budget and not slower, or a clear no.

The same pipeline converts to fp16 (``settings.to``; the conversion and what only 16-bit floats
need are in ``_float16``): the gate, the search (nodes kept in fp32), the timing and the report
are one, and a slower fp16 model is said, not refused, since its gain is on GPUs.

Every input is checked before ONNX Runtime is asked to do anything (the model is float and holds
something to quantise, the data fit the model, the two data sets are different), so a bad input is
an error with nothing written. The model is pre-processed, quantised with every candidate in int8
and judged on the evaluation data; when it misses the budget the search keeps the worst nodes in
float. The model that meets the budget is then timed against the float model (``_speed``): one
that is slower beyond noise fails too, unless ``allow_slower``. Only a model that passes both is
written, atomically, with a contract that names its
parent and the gate it passed: the model first, then the contract, and when the contract cannot
be written the model is removed again, so a failure leaves neither (and never a contract of an
older model beside a new one).
"""

from __future__ import annotations

import logging
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import onnx

from onnxgate._fs import atomic_write_bytes
from onnxgate._pathtext import shown as shown_path
from onnxgate._words import offered, setting
from onnxgate.contract import (
    SIDECAR,
    SecondOpinion,
    drop_stale_contract,
    host_libraries,
)
from onnxgate.data import Sample
from onnxgate.errors import ConfigError, GateError, RunFailed, first_line
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.quantize import _float16, _ort
from onnxgate.quantize._choose import Choice, candidate_results, no_gain_text, race_candidates
from onnxgate.quantize._config import (
    DEFAULT_OP_TYPES,
    QuantizeConfig,
    Settings,
    cpu_features,
    resolve,
    where_quantised,
)
from onnxgate.quantize._contract import (
    GOLDEN_SAMPLES,
    contract_rules,
    second_opinion,
    weak_rule_notices,
    write_quantized_contract,
)
from onnxgate.quantize._gate import Judge, gate_rules
from onnxgate.quantize._ort import (
    WEIGHT_ONLY,
    quantisable,
    quantised_nodes,
    refuse_unquantisable,
    unquantisable_present,
)
from onnxgate.quantize._recipes import Recipe
from onnxgate.quantize._report import (
    DataInfo,
    Latency,
    NodeScore,
    QuantizeReport,
    SpeedGate,
)
from onnxgate.quantize._speed import (
    figures_text,
    growth_text,
    judge_speed,
    measure,
    not_gated,
    profile_cost,
    timing_samples,
)
from onnxgate.quantize._trial import (
    Data,
    Tried,
    plans,
    prepare,
    read_data,
    try_candidate,
    words,
)
from onnxgate.settings import SessionSettings, Tolerances, config_hash

log = logging.getLogger(__name__)


def _ops(proto: onnx.ModelProto) -> dict[str, int]:
    return dict(Counter(n.op_type for n in proto.graph.node).most_common())


def _float_names(proto: onnx.ModelProto, settings: Settings) -> set[str]:
    """Names of the nodes of the quantisable op types that compute in float.

    Dynamic and QOperator quantisation replace a quantised node by integer operators
    (MatMulInteger, QLinearConv...), so a node that keeps its op type computes in float, except
    an op that only moves data: a quantised Gather keeps its type and reads an 8-bit table. In
    QDQ a quantised node keeps its op type and reads DequantizeLinear outputs, and a node kept
    in float reads float tensors only (``_ort.restore_float_inputs``). fp16: the candidates
    whose outputs are float32 (``_float16.full_names``).
    """
    if settings.to != "int8":
        computing = {n.name for n in proto.graph.node if n.op_type not in _float16.MOVES_DATA}
        return _float16.full_names(proto, computing)
    if settings.format != "qdq":
        eight_bit = {
            t.name
            for t in proto.graph.initializer
            if t.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
        }
        return {
            n.name
            for n in proto.graph.node
            if n.op_type in settings.op_types and not any(i in eight_bit for i in n.input)
        }
    dequantised = {
        o
        for n in proto.graph.node
        if n.op_type == "DequantizeLinear" and not n.name.startswith(WEIGHT_ONLY)
        for o in n.output
    }  # a weight stored in int8 behind a DequantizeLinear of its own is read by a float node
    return {
        n.name
        for n in proto.graph.node
        if n.op_type in settings.op_types and not any(i in dequantised for i in n.input)
    }


def _left_in_float(proto: onnx.ModelProto, settings: Settings) -> dict[str, int]:
    """The nodes of ``_float_names``, counted by op type."""
    names = _float_names(proto, settings)
    left = Counter(n.op_type for n in proto.graph.node if n.name in names)
    return dict(left.most_common())


def _reads_dequantised(proto: onnx.ModelProto, names: Sequence[str]) -> list[str]:
    """Those of ``names`` that read a DequantizeLinear output."""
    dequantised = {o for n in proto.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    wanted = set(names)
    return sorted(
        n.name
        for n in proto.graph.node
        if n.name in wanted and any(i in dequantised for i in n.input)
    )


def _write_model(shown: Path, out: Path, *, external: bool) -> None:
    """Write the delivered model to ``out``; its weights in ``OUT.data`` if the source's were."""
    if not external:
        atomic_write_bytes(out, shown.read_bytes())
        return
    stage = shown.parent / "written"
    stage.mkdir(exist_ok=True)
    data = f"{out.name}.data"
    onnx.save_model(
        onnx.load(str(shown)),
        str(stage / out.name),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=data,
    )
    if (stage / data).exists():  # written before the model that names it
        atomic_write_bytes(out.parent / data, (stage / data).read_bytes())
    atomic_write_bytes(out, (stage / out.name).read_bytes())


def _speed_gate(config: QuantizeConfig, delivered: bool) -> SpeedGate | None:
    """The speed gate when the speed is not judged, saying why; None when it is to be timed."""
    if not config.bench:
        return not_gated(
            f"not gated ({setting('bench', False)}): the converted model was not timed and may "
            "be slower than the float model",
            allow_slower=config.allow_slower,
        )
    if not delivered:
        return not_gated(
            "not judged: the accuracy gate failed first", allow_slower=config.allow_slower
        )
    return None


def _timing_failed(model: Path, err: GateError) -> GateError:
    """A timing worker's failure, saying the speed gate cannot judge (nothing is written)."""
    return type(err)(
        f"{model}: timing the float model against its quantised version failed, so the "
        f"speed gate cannot judge it (nothing written): {err.message}",
        hint=(err.hint + " " if err.hint else "")
        + f"{setting('bench', False)} skips the speed gate (the report then says speed was "
        "not gated).",
    )


def _time_and_judge(
    model: Path,
    config: QuantizeConfig,
    settings: Settings,
    paths: dict[str, Path],
    samples: list[Sample],
    say: Callable[[str], None],
) -> tuple[list[Latency], SpeedGate]:
    """Time the models against each other; when slower, profile both to say what costs the time.

    Raises:
        GateError: a timing worker failed (the gate cannot judge the speed; nothing is written).
    """
    try:
        rows, conditions = measure(
            paths,
            samples,
            budget_s=config.bench_budget_s,
            seed=config.seed,
            progress=say,
            to=settings.to,
            ops_libraries=config.ops_libraries,
        )
        if not conditions.reliable:  # the machine was busy: once more before judging
            say("the machine was busy while timing; timing again")
            rows, conditions = measure(
                paths,
                samples,
                budget_s=config.bench_budget_s,
                seed=config.seed,
                progress=say,
                to=settings.to,
                ops_libraries=config.ops_libraries,
            )
    except GateError as err:
        raise _timing_failed(model, err) from err
    return rows, _judge_rows(rows, conditions.reasons, config, settings, paths, samples, say)


def _judge_rows(
    rows: list[Latency],
    unreliable: Sequence[str],
    config: QuantizeConfig,
    settings: Settings,
    paths: dict[str, Path],
    samples: list[Sample],
    say: Callable[[str], None],
) -> SpeedGate:
    """The speed gate on the timed rows; when slower, what costs the time (CPU provider only)."""
    if settings.to != "int8":  # slower on a CPU is expected of fp16: said, never refused
        speed = judge_speed(rows, allow_slower=True, unreliable=unreliable)
        if speed.verdict == "slower":
            slower = "; ".join(figures_text(r) for r in rows if r.verdict == "slower")
            note = (
                f"slower than the float32 model on this CPU beyond noise: {slower}; expected "
                f"and not refused: {_float16.CPU_SLOWER}"
            )
            speed = speed.model_copy(update={"note": note})
        return speed
    speed = judge_speed(rows, allow_slower=config.allow_slower, unreliable=unreliable)
    if speed.verdict != "slower" or settings.runtime is not None or settings.providers:
        return speed  # the profiler runs the installed CPU provider only
    worst = min(range(len(rows)), key=lambda i: rows[i].speedup)
    try:
        cost = profile_cost(
            paths["float"],
            paths["quantised"],
            samples[worst],
            settings,
            say,
            quantized_ms=rows[worst].quantized_ms,
            ops_libraries=config.ops_libraries,
        )
    except GateError as err:  # the verdict stands; only its explanation is missing
        log.warning("profiling failed: %s", err.message)
        return speed.model_copy(
            update={"note": f"{speed.note}; profiling it failed: {err.message}"}
        )
    log.info("slower at %s", figures_text(rows[worst]))
    return speed.model_copy(update={"cost": cost})


def _output(config: QuantizeConfig, model: Path) -> Path:
    """Where the quantised model goes: a file that is not the model itself."""
    out = Path(config.out)
    named = setting("out", str(out)) if offered("out") else f"the output {out}"
    if out.is_dir():
        raise ConfigError(f"{named} is a folder; name the .onnx file to write.")
    if out.resolve() == model.resolve():
        raise ConfigError(f"{named} is the model itself; write the quantised model elsewhere.")
    return out


def _check_kept_in_float(
    shown: onnx.ModelProto,
    excluded_names: Sequence[str],
    settings: Settings,
    warnings: list[str],
    notices: list[str],
) -> None:
    """Say when a node kept in float does not compute in float, or reads int8-rounded values."""
    missing = sorted(set(excluded_names) - _float_names(shown, settings))
    if missing:  # the quantiser did not leave them in float: say so, never hide it
        warnings.append(
            f"node(s) {', '.join(missing)} were excluded from quantisation but do not "
            f"compute in {words(settings)[1]} in the delivered model"
        )
    rounded = _reads_dequantised(shown, excluded_names)
    if rounded and settings.format == "qoperator":
        notices.append(
            f"node(s) kept in float read int8-rounded activations ({', '.join(rounded)}): "
            "QOperator passes int8 tensors between quantised nodes and dequantises them for "
            "float readers"
            + (
                f"; {setting('format', 'qdq')} gives float readers the float tensor"
                if offered("format")
                else ""
            )
        )


def _write_contract(
    out: Path,
    loaded: LoadedModel,
    judge: Judge,
    evaluation: list[Sample],
    report: QuantizeReport,
    contract_config: Tolerances | None,
    opinion: SecondOpinion,
    config: QuantizeConfig,
) -> QuantizeReport:
    """The written model's contract, or its stale one dropped; on failure the model goes too."""
    if contract_config is None:
        dropped = drop_stale_contract(out)
        return report.model_copy(update={"notices": report.notices + dropped})
    try:
        path = write_quantized_contract(
            out,
            loaded,
            judge,
            evaluation,
            report,
            contract_config,
            opinion,
            config_hash=config_hash(config),
        )
    except BaseException:
        # a model without its contract, or beside an older model's, would mislead: neither stays
        out.unlink(missing_ok=True)
        drop_stale_contract(out)
        raise
    weak = weak_rule_notices(out)
    return report.model_copy(update={"contract": str(path), "notices": report.notices + weak})


def quantize(
    model: str | Path,
    config: QuantizeConfig,
    *,
    progress: Callable[[str], None] | None = None,
) -> QuantizeReport:
    """Quantise a float model to int8 (or fp16) inside the accuracy budget; write it only then.

    Args:
        model: the float ``.onnx`` model.
        config: how to quantise, on which data, within which budget.
        progress: called with a short message before each step.

    Returns:
        The report; ``passed`` is False (and nothing is written) when the budget was missed,
        or when the quantised model is slower than the float one beyond noise on this machine
        and ``config.allow_slower`` is not set (``report.speed`` says which op types grew).

    Raises:
        ModelLoadError: the model cannot be read.
        ConfigError: contradicting options, a quantised model, or nothing to quantise.
        FeedError: calibration or evaluation data that do not fit the model.
        RunFailed: ONNX Runtime failed to quantise or run a model, or a timing worker failed.
        InternalError: a timing worker failed in onnxgate's own code.
    """
    try:
        return _quantize(model, config, progress)
    finally:
        _ort.forget_parent()


def _quantize(
    model: str | Path, config: QuantizeConfig, progress: Callable[[str], None] | None
) -> QuantizeReport:
    say = progress or (lambda message: log.info("%s", message))
    features = cpu_features()
    settings, notices = resolve(config, features, quantisable=quantisable)
    loaded = load_model(model, load_weights=True)
    out = _output(config, loaded.path)
    config = config.model_copy(update={"ops_libraries": _libraries(config, loaded.path)})
    if settings.mode == "static" and config.ops_libraries:
        _refuse_static_with_libraries(config.ops_libraries, str(loaded.path))
    signature = Signature.from_graph(loaded.proto.graph)
    if settings.to != "int8":
        _float16.refuse_unconvertible(loaded.proto, str(loaded.path), settings.to)
        if settings.to == "bf16":
            _float16.refuse_bf16_on_cpu(loaded.proto, str(loaded.path))
    else:
        _refuse_int8(loaded, settings, config, notices)
    return _quantize_checked(config, settings, notices, features, loaded, out, signature, say)


def _libraries(config: QuantizeConfig, model: Path) -> tuple[str, ...]:
    """The custom operator libraries the sessions register: those given, else the parent's.

    The parent contract's are found by name on this host (``host_libraries``); a contract that
    cannot be read gives none (quantize needs no contract).

    Raises:
        ConfigError: the parent contract records a library file that was not given.
    """
    if config.ops_libraries or not SIDECAR.exists(model):
        return config.ops_libraries
    try:
        contract = SIDECAR.read(model)
    except GateError:
        return ()
    libraries = host_libraries(contract, (), where=shown_path(SIDECAR.location(model)))
    if libraries:
        log.info("custom operator libraries from the parent contract: %s", libraries)
    return libraries


def _refuse_static_with_libraries(libraries: Sequence[str], model: str) -> None:
    """Static calibration cannot register custom operator libraries: refuse it, saying why.

    ONNX Runtime's calibrator (``onnxruntime.quantization.calibrate``) makes its own session with
    fixed options and no way to pass custom operator libraries, so a model whose custom-domain
    nodes need one cannot be calibrated; dynamic quantisation makes no session.

    Raises:
        ConfigError: naming the libraries and what to do instead.
    """
    raise ConfigError(
        f"{model}: static quantisation cannot register the custom operator "
        f"librar{'ies' if len(libraries) > 1 else 'y'} {', '.join(libraries)}: ONNX Runtime's "
        "calibrator makes its own session, which takes no custom operator library.",
        hint=f"Use {setting('mode', 'dynamic')}, which needs no calibration session (the "
        "custom-domain nodes stay in float); or quantise a model without the custom operators "
        "and add them afterwards.",
        field="mode",
    )


def _refuse_int8(
    loaded: LoadedModel, settings: Settings, config: QuantizeConfig, notices: list[str]
) -> None:
    """Refuse a model int8 cannot quantise; a notice names what the mode leaves in float."""
    requested = tuple(dict.fromkeys(config.op_types)) or DEFAULT_OP_TYPES
    refuse_unquantisable(loaded.proto, settings, str(loaded.path), requested=requested)
    elsewhere = unquantisable_present(loaded.proto, settings, requested)
    if elsewhere:
        notices.append(
            "left in float: "
            + ", ".join(f"{n} {op} node(s)" for op, n in elsewhere.items())
            + " ("
            + "; ".join(where_quantised(op, quantisable) for op in elsewhere)
            + ")"
        )


def _quantize_checked(
    config: QuantizeConfig,
    settings: Settings,
    notices: list[str],
    features: list[str],
    loaded: LoadedModel,
    out: Path,
    signature: Signature,
    say: Callable[[str], None],
) -> QuantizeReport:
    session = SessionSettings(ops_libraries=config.ops_libraries)
    if config.ops_libraries:
        notices.append(f"custom operator libraries: {', '.join(config.ops_libraries)}")
    planned_all = plans(config, settings, features, notices)
    static = any(s.mode == "static" for _, s in planned_all)
    data = read_data(config, static, signature, loaded, say)
    evaluation, labels = data.evaluation, data.labels
    rules, gate_notices = gate_rules(loaded.proto, signature, config, labels is not None)
    notices += gate_notices
    with tempfile.TemporaryDirectory(prefix="onnxgate-quantize-") as folder:
        tmp = Path(folder)
        source = tmp / "float.onnx"
        onnx.save(loaded.proto, str(source))
        say(f"running the float model on {len(evaluation)} evaluation sample(s)")
        judge = Judge(
            source,
            signature,
            evaluation,
            rules,
            max_drop=config.max_drop,
            labels=labels,
            session=session,
        )
        tried: list[Tried] = []
        failed: dict[str, tuple[Recipe, str]] = {}
        prepared: dict[bool, Path] = {}
        for recipe, planned in planned_all:
            if recipe is not None:
                say(f"recipe {recipe.name}: {recipe.why} ({recipe.where()})")
            try:
                pre = prepare(planned, recipe, loaded, source, tmp, prepared, notices, say)
                tried.append(
                    try_candidate(
                        config,
                        recipe,
                        planned,
                        loaded,
                        pre,
                        tmp / (recipe.name if recipe else "candidate"),
                        judge,
                        data,
                        notices,
                        say,
                        lambda: Judge(
                            source,
                            signature,
                            data.calibration,
                            rules,
                            max_drop=config.max_drop,
                            session=session,
                        ),
                    )
                )
            except Exception as err:  # one recipe failing leaves the others to judge
                if recipe is None:
                    raise
                message = (
                    err.message
                    if isinstance(err, GateError)
                    else first_line(err, with_type=True)  # onnxscript's fusions raise anything
                )
                log.warning("recipe %s failed: %s", recipe.name, message)
                failed[recipe.name] = (recipe, message)
        if not tried:
            raise RunFailed(
                f"{loaded.path}: every int8 recipe failed: "
                + "; ".join(f"{name}: {why}" for name, (_, why) in failed.items()),
                hint=f"Name the recipes that work with {setting('recipes')}, or drop it.",
            )
        return _judged(
            config, loaded, out, signature, say, notices, features, data, judge, tried, failed
        )


def _judged(
    config: QuantizeConfig,
    loaded: LoadedModel,
    out: Path,
    signature: Signature,
    say: Callable[[str], None],
    notices: list[str],
    features: list[str],
    data: Data,
    judge: Judge,
    tried: list[Tried],
    failed: dict[str, tuple[Recipe, str]],
) -> QuantizeReport:
    """Time what passed, keep one, and write it with its contract; the report either way."""
    evaluation, warnings = data.evaluation, data.warnings
    recipes = tried[0].recipe is not None
    passing = [t for t in tried if t.delivered is not None]
    pick = min(passing or tried, key=lambda t: t.found.shown_attempt.worst or 0.0)
    latency: list[Latency] = []
    speed = _speed_gate(config, bool(passing))
    timing = timing_samples(loaded, signature, config, evaluation[0]) if speed is None else []
    source = Path(judge.float_model)
    choice: Choice | None = None
    no_gain: str | None = None
    if speed is None and not recipes:
        t = tried[0]
        assert t.delivered is not None
        excluded_names = t.found.best[1] if t.found.best else []
        latency, speed = _time_and_judge(
            loaded.path,
            config,
            t.settings,
            {"float": source, "quantised": t.delivered}
            | ({"all-int8": t.all_int8} if excluded_names else {}),
            timing,
            say,
        )
    elif speed is None:
        try:
            choice, unreliable = race_candidates(
                source,
                {t.label: (t.delivered, t.settings) for t in passing if t.delivered},
                timing,
                errors={t.label: t.found.shown_attempt.worst for t in passing},
                budget_s=config.bench_budget_s,
                seed=config.seed,
                ops_libraries=config.ops_libraries,
                progress=say,
            )
        except GateError as err:
            raise _timing_failed(loaded.path, err) from err
        pick = next(t for t in passing if t.label == choice.chosen)
        latency = choice.rows[choice.chosen]
        assert pick.delivered is not None
        speed = _judge_rows(
            latency,
            unreliable,
            config,
            pick.settings,
            {"float": source, "quantised": pick.delivered},
            timing,
            say,
        )
        if speed.verdict in ("slower", "within noise"):  # inconclusive proves nothing either way
            no_gain = no_gain_text(pick.label, speed.note)
    settings, found = pick.settings, pick.found
    best, reason, attempts = found.best, found.reason, found.attempts
    if recipes and not passing:
        reason = "no int8 recipe met the budget: " + "; ".join(
            f"{t.label}: {t.found.reason}" for t in tried
        )
    shown, shown_attempt = found.shown, found.shown_attempt
    excluded_names = best[1] if best else shown_attempt.excluded
    scores = {s.node: s for s in found.ranking}
    excluded = [scores.get(n) or NodeScore(node=n, op_type="", score=0.0) for n in excluded_names]
    shown_proto = onnx.load(str(shown), load_external_data=False)
    float_ops = _left_in_float(shown_proto, settings)
    _check_kept_in_float(shown_proto, excluded_names, settings, warnings, notices)
    if settings.to != "int8":
        measured = _float16.cpu_float32_notice(shown_proto, str(loaded.path))
        notices += [measured] if measured else []
    if speed is not None and speed.gated and not speed.passed:
        best = None
        cost = speed.cost.grown[:1] if speed.cost else []
        reason = (
            (no_gain + "; " if no_gain else "")
            + f"the quantised model is {speed.note}"
            + "".join(f"; grown most: {growth_text(g)}" for g in cost)
            + f"; {setting('allow_slower', True)} writes it anyway"
        )
    elif speed is not None and speed.verdict == "slower" and settings.to == "int8":
        warnings.append(
            (no_gain + "; " if no_gain else "") + f"the quantised model is {speed.note}"
        )
    elif no_gain:
        warnings.append(no_gain)
    elif speed is not None and speed.verdict == "inconclusive":
        noun = "quantised" if settings.to == "int8" else settings.to
        warnings.append(f"the {noun} model's {speed.note}")
    if any(r.noisy for r in latency):
        warnings.append(
            "some latencies vary by more than 10% (CV): the machine is busy, so the "
            "intervals are wide"
        )
    size_before = loaded.size_bytes + loaded.external_bytes  # the weights in side files too
    assert speed is not None
    report = QuantizeReport(
        passed=best is not None,
        model=str(loaded.path),
        out=str(out) if best is not None else None,
        settings=settings,
        cpu_features=features,
        notices=notices,
        warnings=list(dict.fromkeys(warnings)),
        calibration=data.calibration_info,
        evaluation=DataInfo(source=data.eval_source, samples=len(evaluation), rows=data.eval_rows),
        overlap_rows=data.overlap_rows,
        max_drop=config.max_drop,
        gate=shown_attempt.figures,
        attempts=attempts,
        ranking=found.ranking,
        ranked_on=found.ranked_on,
        excluded=excluded,
        quantized_nodes=quantised_nodes(shown_proto)
        if settings.to == "int8"
        else _float16.half_nodes(shown_proto),
        float_ops=float_ops,
        size_before=size_before,
        size_after=shown.stat().st_size,
        size_ratio=shown.stat().st_size / size_before,
        gain=None
        if settings.to == "int8"
        else _float16.gain(settings.to, speed, shown.stat().st_size / size_before),
        ops_before=_ops(loaded.proto),
        ops_after=_ops(shown_proto),
        latency=latency,
        speed=speed,
        reason=reason,
        candidates=candidate_results(
            [
                (
                    t.recipe,
                    t.settings,
                    t.found.shown_attempt,
                    t.found.shown,
                    t.delivered is not None,
                )
                for t in tried
                if t.recipe is not None
            ],
            failed,
            choice,
            size_before=size_before,
            kept=pick.label if best is not None else None,
            timed=speed.gated,
        )
        if recipes
        else [],
    )
    if best is None:
        return report
    contract_config = None
    opinion = SecondOpinion(detail=f"not taken: {setting('second_opinion', False)}")
    if config.contract:
        say("measuring the contract's rules on its golden samples")
        contract_config, rule_notices = contract_rules(
            shown, pick.judge, signature, evaluation[:GOLDEN_SAMPLES], config.max_drop
        )
        report = report.model_copy(update={"notices": report.notices + rule_notices})
        if config.second_opinion:
            # before anything is written: golden outputs a second runner disputes are not kept
            opinion = second_opinion(loaded, judge, signature, evaluation[:GOLDEN_SAMPLES], say)
    say(f"writing {out}")
    _write_model(shown, out, external=bool(loaded.external_data))
    return _write_contract(
        out, loaded, pick.judge, evaluation, report, contract_config, opinion, config
    )
