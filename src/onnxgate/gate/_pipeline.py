"""``onnxgate gate``: run the steps of a ``gate.toml`` in order, write one report, register a pass.

The steps run in the order of their records (``_records.RECORDS``); each names the steps whose
artefacts it reads (``NEEDS``), and when one of those did not pass it is reported as not run,
with the reason, instead of running on an artefact nobody vouched for. The files a step wrote
(its artefacts, cached with its result) are the ones its record declares that changed; a file
it wrote without declaring it is logged as an onnxgate bug. A step whose inputs are unchanged (the same files by sha256, the
same settings by hash, the same machine and runtime) is taken from the cache with the files it
wrote, and says so. A contract is keyed without the times of its making (``_content_sha256``),
so what follows an export that always runs (``torch:``, ``sklearn:``) is cached too.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import platform
import shutil
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from onnxgate._fs import atomic_write_text, cache_dir, fresh_folder, resource_error, staged_file
from onnxgate._pathtext import mask_uri
from onnxgate._version import __version__
from onnxgate._words import gate_key, gate_offers, gate_words, renamed, speaking
from onnxgate.contract_store import sha256_file, signature_required, signer, verifiers
from onnxgate.data import Synthesized, listen_synthetic
from onnxgate.errors import (
    ConfigError,
    ExitCode,
    GateError,
    ResourceExhausted,
)
from onnxgate.gate import _steps
from onnxgate.gate._config import BenchStep, GateConfig, Step, load_config
from onnxgate.gate._records import BY_NAME, NEEDS, ORDER, RUNNERS
from onnxgate.gate._report import (
    Artefact,
    Environment,
    GateReport,
    MlflowRegistration,
    Registration,
    StepName,
    StepResult,
)
from onnxgate.settings import config_hash

log = logging.getLogger(__name__)

CACHE_FORMAT = "onnxgate.gate-cache/2"
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")


def environment() -> Environment:
    """Where this run happens, with a fingerprint figures are filed under."""
    import onnx

    from onnxgate.doctor import cpu_facts
    from onnxgate.runners import runtime_version

    cpu = cpu_facts()
    cores = cpu.affinity or cpu.logical or 1
    isa = [f for f in cpu.features if f in ISA_FLAGS or f.startswith(("asimd", "sve", "i8mm"))]
    model = cpu.model_name or platform.processor() or platform.machine()
    runtime = runtime_version()
    plat = f"{platform.system()} {platform.machine()}"
    key = "\n".join([model, ",".join(isa), str(cores), runtime, plat])
    return Environment(
        onnxgate=__version__,
        onnxruntime=runtime,
        onnx=onnx.__version__,
        python=platform.python_version(),
        platform=plat,
        cpu=model,
        isa=isa,
        cores=cores,
        fingerprint=hashlib.sha256(key.encode()).hexdigest()[:16],
    )


Stamp = tuple[str, int, int, int, int]
"""A file as last seen: resolved path, size, inode, modification and change time (ns)."""


def _stamp(path: Path) -> Stamp:
    """What changes when a file is written.

    An atomic write gives a new inode too, so a rewrite of the same size within the clock's
    resolution is not taken for the old file.
    """
    stat = path.stat()
    return (str(path.resolve()), stat.st_size, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns)


@functools.lru_cache(maxsize=4096)
def _digest(stamp: Stamp) -> str:
    return sha256_file(Path(stamp[0]))


def _sha256(path: Path) -> str:
    """A file's sha256, hashed once while it stays the same file (``_stamp``).

    Every step snapshots the run folder before and after it runs and for its cache key; the
    models in it are tens of MB, and only the files a step wrote are read again.
    """
    return _digest(_stamp(path))


REPORTS = frozenset({"report.json", "report.html", "junit.xml"})
CONTRACT_SUFFIX = ".contract.json"


def _snapshot(folder: Path, *, content: bool = False) -> dict[str, str]:
    """Every file of the run folder by relative path → sha256, but the reports and temp files.

    Temp files (``_fs.staged_file``'s and the cache's) start with a dot. With ``content``, a
    contract is hashed as ``_content_sha256`` reads it: for cache keys, not for artefacts.
    """
    found = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or str(rel) in REPORTS or path.name.startswith("."):
            continue
        if content and path.name.endswith(CONTRACT_SUFFIX):
            found[str(rel)] = _content_sha256(_stamp(path))
        else:
            found[str(rel)] = _sha256(path)
    return found


def _digests(folder: Path, paths: Iterable[Path]) -> dict[str, str]:
    """The files of ``paths`` that exist, by relative path → sha256, in ``_snapshot``'s order."""
    found = {p for p in paths if p.is_file()}
    return {str(path.relative_to(folder)): _sha256(path) for path in sorted(found)}


def _stamps(folder: Path) -> dict[str, Stamp]:
    """Every file of the run folder as last seen (``_stamp``): what ``_check_declared`` diffs."""
    return {
        str(path.relative_to(folder)): _stamp(path)
        for path in folder.rglob("*")
        if path.is_file() and not path.name.startswith(".")
    }


UNDECLARED = "wrote files its record does not declare"


def _check_declared(
    name: str, before: dict[str, Stamp], after: dict[str, Stamp], declared: dict[str, str]
) -> None:
    """Log the files a step wrote that its record does not declare (a bug in onnxgate).

    Such a file is neither listed among the step's artefacts nor cached; the run's artefacts
    (the whole folder) still list it. Only file stamps are compared: nothing is hashed.
    """
    changed = {rel for rel, stamp in after.items() if before.get(rel) != stamp}
    undeclared = sorted(changed - set(declared) - REPORTS)
    if undeclared:
        log.warning("step %s %s: %s", name, UNDECLARED, ", ".join(undeclared))


@functools.lru_cache(maxsize=256)
def _content_sha256(stamp: Stamp) -> str:
    """A contract's sha256 without the times of its making, for cache keys.

    ``created`` (the provenance's, each tuned record's) says when the file was written, not what
    it holds: a re-export of the same model differs from the last only there and in the
    signature over it, whose signer (algorithm and key) is kept. The time is kept in the file,
    since users read it as when the model was exported; a cached step therefore never restores
    over a file other than the one it was cached over (``_Cache.get``), which would put an older
    contract back over the fresh export's. What is not a contract's JSON is hashed as it is.
    """
    raw = Path(stamp[0]).read_bytes()
    try:
        document = json.loads(raw)
        document.get("provenance", {}).pop("created", None)
        for record in document.get("performance", {}).get("tuned", []):
            record.pop("created", None)
        if isinstance(signing := document.get("signing"), dict):
            document["signing"] = {k: signing.get(k) for k in ("algorithm", "key_id")}
    except (ValueError, AttributeError, TypeError):  # not a contract's JSON: hashed as it is
        return hashlib.sha256(raw).hexdigest()
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _role(rel: str, model: str) -> str:
    """``minilm.int8.contract.json`` → ``contract.int8``: what a file is, for the registry.

    Other files (external data) are named by their path in the run folder, which is unique.
    """
    if "/" in rel:
        return rel
    name = rel
    stem = name.removeprefix(f"{model}.")
    kinds = {"onnx": "model", "contract.json": "contract", "golden.npz": "golden"}
    for suffix, kind in kinds.items():
        if stem == suffix:
            return kind
        if stem.endswith(f".{suffix}"):
            return f"{kind}.{stem.removesuffix(f'.{suffix}')}"
    return name


class _Cache:
    """Step results and the files they wrote, keyed by what the step read and how."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder

    def get(self, key: str, run_dir: Path) -> StepResult | None:
        if self.folder is None:
            return None
        entry = self.folder / key
        try:
            data = json.loads((entry / "result.json").read_text())
            if data.get("format") != CACHE_FORMAT:
                return None
            result = StepResult.model_validate(data["result"])
            for artefact in result.artefacts:
                blob = entry / "files" / artefact.sha256
                if _sha256(blob) != artefact.sha256:
                    return None
                # the key read a contract without its times: restoring over a newer one than
                # the step was cached over would put an older contract back
                target = run_dir / artefact.path
                here = _sha256(target) if target.exists() else None
                if here not in (None, artefact.sha256, data["replaced"].get(artefact.path)):
                    return None
            for artefact in result.artefacts:
                target = run_dir / artefact.path
                with staged_file(target) as tmp:  # whole, or the file as it was
                    shutil.copyfile(entry / "files" / artefact.sha256, tmp)
        except (OSError, ValueError, KeyError, ResourceExhausted):
            return None
        return result.model_copy(update={"cached": True})

    def put(self, key: str, result: StepResult, run_dir: Path, replaced: dict[str, str]) -> None:
        """Keep a passed step's result and files, and the files it wrote over by their sha256."""
        # figures other load spoiled are not kept: the next run may time on a quieter machine
        if (
            self.folder is None
            or result.status != "passed"
            or result.figures.get("reliable") is False
        ):
            return
        entry = self.folder / key
        try:
            (entry / "files").mkdir(parents=True, exist_ok=True)
            for artefact in result.artefacts:
                blob = entry / "files" / artefact.sha256
                if not blob.exists():
                    with staged_file(blob) as tmp:  # removed if the disk fills up meanwhile
                        shutil.copyfile(run_dir / artefact.path, tmp)
            result_json = result.model_dump(mode="json")
            document = {"format": CACHE_FORMAT, "result": result_json, "replaced": replaced}
            atomic_write_text(entry / "result.json", json.dumps(document))
        except (OSError, ResourceExhausted) as error:  # a cache costs time, not results
            log.warning("cannot cache step %s in %s: %s", result.name, entry, error)


def _cache_key(
    name: str, section: Step, ctx: _steps.Context, env: Environment, config: GateConfig
) -> str | None:
    """What a step's result depends on: its settings, the files it reads, runtime and machine."""
    files = _snapshot(ctx.run_dir, content=True)
    outside = _outside_files(name, section, config)
    if outside is None:
        return None
    key = {
        "step": name,
        "outside": outside,
        "settings": config_hash(section),
        "feeds": config.feeds.model_dump(mode="json"),  # [feeds] is every step's default
        "targets": config.targets.model_dump(mode="json"),
        "model": config.model.model_dump(mode="json") if name == "export" else None,
        "files": files,
        "onnxgate": __version__,
        "machine": env.fingerprint,
        "tuned": ctx.passed.get("tune") if name == "bench" else None,
        "keys": _contract_keys(),
    }
    if name == "bench" and isinstance(section, BenchStep):
        # the runtimes timed besides the installed one, when there are any: a result cached
        # before bench timed them (or for other ones) is not taken for theirs
        timed = _steps.bench_runtimes(section, list(config.targets.runtimes))
        if timed:
            key["timed"] = timed
    return config_hash(key)


def _contract_keys() -> dict[str, Any]:
    """The contract keys the environment configures, by id: a step signs or checks with them.

    Without them in the key, a run with a signing key would restore an earlier, keyless run's
    unsigned contract. A key that cannot be read is keyed by the error, which the step reports.
    """
    try:
        by = signer()
        checks = verifiers()
        required = signature_required(False)
    except GateError as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {
        "signer": f"{by.algorithm}:{by.key_id}" if by is not None else None,
        "verifiers": sorted(f"{v.algorithm}:{v.key_id}" for v in checks.values()),
        "required": required,
    }


def _outside_files(name: str, section: Step, config: GateConfig) -> list[str] | None:
    """Files outside the run folder a step reads, with their sha256, for its cache key.

    None when the step reads something the gate cannot hash (a module's code: ``torch:``,
    ``sklearn:``, ``package.module:function``): such a step always runs.
    """
    specs: list[str | None] = []
    if name == "export":
        if config.model.kind != "onnx":
            return None  # the module or estimator is code; the exported bytes key what follows
        specs.append(config.model.source)
    if config.feeds.inputs is not None:
        specs.append(str(config.feeds.inputs))
    for attribute in ("feeds",):
        feeds = getattr(section, attribute, None)
        if feeds is not None and feeds.inputs is not None:
            specs.append(str(feeds.inputs))
    for attribute in ("against", "vs", "eval", "calibration", "labels"):
        value = getattr(section, attribute, None)
        if value is not None:
            specs.append(str(value))
    files: list[str] = []
    for spec in specs:
        if spec is None or spec in ("reference", "ort") or spec.startswith("ort:"):
            continue
        path = Path(spec)
        if not path.exists():
            return None  # torch:..., sklearn:..., package.module:function: code, not a file
        inside = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        if path.suffix == ".onnx" and path.is_file():
            from onnxgate.model import load_model  # its external data, checked as safe

            inside += sorted({ref.path for ref in load_model(path).external_data})
        files += [f"{p}:{_sha256(p)}" for p in inside]
    return files


def _run_dir(config: GateConfig, out: Path | None) -> Path:
    if out is not None:
        folder = out
    else:
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        folder = config.output.dir / f"{config.model.name}-{stamp}"
        n = 1
        while folder.exists():
            n += 1
            folder = config.output.dir / f"{config.model.name}-{stamp}-{n}"
    fresh_folder(folder, what="the run folder ", holds="a run folder holds exactly one run")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _not_run(name: StepName, ctx: _steps.Context, config: GateConfig) -> str | None:
    for need in NEEDS[name]:
        section = getattr(config.steps, need)
        if need != "export" and not section.enabled:
            continue
        if not ctx.passed.get(need, False):
            status = "did not pass" if need in ctx.passed else "did not run"
            return f"{need} {status}"
    return None


def run_gate(
    config: GateConfig | str | Path,
    *,
    out: Path | None = None,
    registry: str | None = None,
    register: bool = True,
    cache: bool = True,
    progress: Callable[[str], None] | None = None,
    on_step: Callable[[StepResult], None] | None = None,
) -> GateReport:
    """Run a gate: every step of the config, one report, and registration when it passed.

    Args:
        config: a validated config, or the path of a ``gate.toml``.
        out: the run folder (created; must be empty); default ``[output] dir``/NAME-TIMESTAMP.
        registry: a registry URL that replaces ``[register] registry``.
        register: False leaves the registry alone even when the gate passes.
        cache: False runs every step even when its inputs are unchanged.
        progress: called with a short message before slow work.
        on_step: called with each step's result as soon as it is known.

    Raises:
        ConfigError: the config is invalid, or the run folder is not empty.
        RegistryUnreachable: the gate passed and the registry cannot be reached (exit 3);
            ``MlflowUnreachable`` when ``[register] mlflow``'s server cannot (the version is
            registered in onnxgate's registry all the same, and the report says so).
    """
    path = Path(config) if not isinstance(config, GateConfig) else None
    if path is not None:
        config = load_config(path)
    assert isinstance(config, GateConfig)
    say = progress or (lambda message: log.info("%s", message))
    started = datetime.now(UTC)
    clock = time.perf_counter()
    env = environment()
    run_dir = _run_dir(config, out)
    ctx = _steps.Context(config=config, run_dir=run_dir, progress=say)
    store = _Cache(cache_dir() / "gate" if cache else None)
    results: list[StepResult] = []
    fed: dict[str, list[Synthesized]] = {}
    for name in ORDER:
        section = getattr(config.steps, name)
        if not section.enabled and name != "export":
            result = StepResult(name=name, status="not_run", reason="disabled in the config")
        elif (why := _not_run(name, ctx, config)) is not None:
            result = StepResult(name=name, status="not_run", reason=why)
        else:
            heard = fed.setdefault(name, [])
            with listen_synthetic(heard.append):
                result = _run_step(name, section, ctx, env, config, store, say, heard)
            ctx.passed[name] = result.passed or (
                result.status == "inconclusive" and not result.fails_gate
            )
        results.append(result)
        if on_step is not None:
            on_step(result)
    passed = ctx.passed.get("export", False) and not any(r.fails_gate for r in results)
    artefacts = [
        _artefact(run_dir, rel, digest, config.model.name)
        for rel, digest in _snapshot(run_dir).items()
    ]
    model_sha = next((a.sha256 for a in artefacts if a.role == "model"), None)
    report = GateReport(
        name=config.model.name,
        passed=passed,
        config_path=str(path) if path else "",
        config_hash=config.digest(),
        config=_shown_config(config),
        source=config.model.source,
        model_sha256=model_sha,
        run_dir=str(run_dir),
        started=started.isoformat(timespec="seconds"),
        seconds=round(time.perf_counter() - clock, 3),
        environment=env,
        steps=results,
        artefacts=artefacts,
        notes=feeds_notes(fed),
    )
    write_outputs(report, run_dir)  # before registering: an unreachable registry loses nothing
    if passed and register and config.registration is not None and config.registration.enabled:
        say("registering")
        report = report.model_copy(update={"registered": _register(report, config, registry)})
        write_outputs(report, run_dir)
        if config.registration.mlflow:  # after: an unreachable MLflow loses no registration
            say("publishing to MLflow")
            report = _publish(report, config, registry)
            write_outputs(report, run_dir)
    return report


def exit_code(report: GateReport) -> ExitCode:
    """The gate's exit code: 0 passed, 3 when it could not prove the model here, 1 otherwise.

    3 (environment) when no step failed its check and a step could not run for the machine's
    sake: a missing extra, provider or runtime (an ``EnvironmentProblem``). A failed check says
    something about the model and wins over it: 1, as does any other step error.
    """
    if report.passed:
        return ExitCode.PASSED
    errors = [s for s in report.steps if s.status == "error"]
    # a failed check, or an inconclusive step told to fail, says something about the model
    failed = any(s.fails_gate and s.status != "error" for s in report.steps)
    if errors and not failed and all(s.exit_code == ExitCode.ENVIRONMENT for s in errors):
        return ExitCode.ENVIRONMENT
    return ExitCode.FAILED


def _artefact(run_dir: Path, rel: str, digest: str, model: str) -> Artefact:
    return Artefact(
        role=_role(rel, model),
        path=rel,
        sha256=digest,
        size=(run_dir / rel).stat().st_size,
    )


def _run_step(
    name: StepName,
    section: Step,
    ctx: _steps.Context,
    env: Environment,
    config: GateConfig,
    store: _Cache,
    say: Callable[[str], None],
    heard: list[Synthesized],
) -> StepResult:
    clock = time.perf_counter()
    settings = config_hash(section)
    feeds = getattr(section, "feeds", None)
    own = feeds is not None and feeds != type(feeds)()  # the step's own table, not [feeds]
    # quantize's data taken from [feeds] inputs is named by that key, where the user set it
    taken = _steps.from_feeds(name, section, config.feeds)
    words = functools.partial(gate_words, step=name, own_feeds=own, from_feeds=taken)
    offers = functools.partial(gate_offers, keys=type(section).model_fields)
    try:
        key = _cache_key(name, section, ctx, env, config)
        if key is not None and (hit := store.get(key, ctx.run_dir)) is not None:
            say(f"{name}: unchanged since an earlier run, taken from the cache")
            return hit
        say(name)
        record = BY_NAME[name]
        stamps = _stamps(ctx.run_dir)
        before = _digests(ctx.run_dir, record.produces(ctx.run_dir, config.model.name))
        with speaking(words, offers):
            outcome = RUNNERS[name](ctx, section)
    except OSError as error:  # a file the step reads or writes: the user's to fix
        exhausted = resource_error(error)  # a full disk, a read-only folder: exit 3
        return StepResult(
            name=name,
            status="error",
            seconds=round(time.perf_counter() - clock, 3),
            summary=exhausted.message
            if exhausted
            else f"{error.strerror or error}: {error.filename or ''}".strip(),
            reason=str(exhausted or error),
            exit_code=int(exhausted.exit_code if exhausted else ExitCode.USAGE),
            config_hash=settings,
        )
    except GateError as error:
        if isinstance(error, ConfigError):  # the config's keys, not a command's flags
            error = renamed(
                error, functools.partial(gate_key, step=name, own_feeds=own, from_feeds=taken)
            )
        if heard and Synthesized.may_explain(error):
            # a run on made-up inputs failed: say which, and the keys that give ones that fit
            with speaking(words, offers):
                error.hint = " ".join(filter(None, (heard[-1].hint(), error.hint)))
        reason = error.message + (f" ({error.hint})" if error.hint else "")
        return StepResult(
            name=name,
            status="error",
            seconds=round(time.perf_counter() - clock, 3),
            summary=error.message.splitlines()[0],
            reason=reason,
            exit_code=int(error.exit_code),
            config_hash=settings,
        )
    except Exception as error:  # a bug in onnxgate: this step's error, and the run goes on
        log.debug("step %s failed", name, exc_info=True)
        return StepResult(
            name=name,
            status="error",
            seconds=round(time.perf_counter() - clock, 3),
            summary=f"internal error: {type(error).__name__}: {error}",
            reason="a bug in onnxgate; run again with -vv for the traceback and report it",
            exit_code=int(ExitCode.INTERNAL),
            config_hash=settings,
        )
    after = _digests(ctx.run_dir, record.produces(ctx.run_dir, config.model.name))
    written = [
        _artefact(ctx.run_dir, rel, digest, config.model.name)
        for rel, digest in after.items()
        if before.get(rel) != digest
    ]
    _check_declared(name, stamps, _stamps(ctx.run_dir), after)
    report = outcome.report
    inconclusive = outcome.inconclusive and not outcome.passed
    result = StepResult(
        name=name,
        status="passed" if outcome.passed else "inconclusive" if inconclusive else "failed",
        seconds=round(time.perf_counter() - clock, 3),
        summary=outcome.summary,
        reason=None if outcome.passed else (outcome.reason or outcome.summary),
        figures={k: _scalar(v) for k, v in outcome.figures.items()},
        report=report.model_dump(mode="json") if hasattr(report, "model_dump") else report,
        config_hash=settings,
        artefacts=written,
        on_unreliable=getattr(section, "on_unreliable", "warn") if inconclusive else None,
    )
    if key is not None:
        replaced = {a.path: before[a.path] for a in written if a.path in before}
        store.put(key, result, ctx.run_dir, replaced)
    return result


def feeds_notes(fed: dict[str, list[Synthesized]]) -> list[str]:
    """One note for the whole run: the synthetic feeds each step made, and the keys to choose."""
    made = {step: heard for step, heard in fed.items() if heard}
    if not made:
        return []
    with speaking(gate_words):
        last = list(made.values())[-1][-1]
        choose = last.notice().rsplit("; ", 1)[-1]
    steps: dict[str, list[str]] = {}  # shapes → the steps fed them, each said once
    for step, heard in made.items():
        for shape in dict.fromkeys(h.shapes for h in heard):
            steps.setdefault(shape, []).append(step)
    shapes = "; ".join(f"{', '.join(names)}: {shape}" for shape, names in steps.items())
    return [f"feeds: synthetic ({shapes}); {choose}"]


def _scalar(value: Any) -> float | int | str | bool | None:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _register(report: GateReport, config: GateConfig, url: str | None) -> Registration:
    from onnxgate.registry import open_registry

    section = config.registration
    assert section is not None
    run_dir = Path(report.run_dir)
    registry = open_registry(url or section.registry, section.store)
    try:
        version = registry.register(
            section.name or config.model.name,
            artefacts={a.role: run_dir / a.path for a in report.artefacts},
            gate=report,
            alias=section.alias,
            description=section.description,
            tags=section.tags,
            source={"source": config.model.source, "config": report.config_path},
        )
        return Registration(
            registry=registry.url_masked,
            name=version.name,
            version=version.number,
            aliases=list(version.aliases),
        )
    finally:
        registry.close()


def _shown_config(config: GateConfig) -> dict[str, Any]:
    """The config as the report shows it: the registry's and MLflow's credentials masked."""
    document = config.model_dump(mode="json", by_alias=True)
    section = document.get("register") or {}
    for key in ("registry", "mlflow"):
        if isinstance(section.get(key), str):
            section[key] = mask_uri(section[key])
    return document


def _publish(report: GateReport, config: GateConfig, url: str | None) -> GateReport:
    """``[register] mlflow``: the version just registered, published with this run's reports."""
    from onnxgate.registry import open_registry, publish_mlflow

    section, registered = config.registration, report.registered
    assert section is not None and section.mlflow and registered is not None
    run_dir = Path(report.run_dir)
    with open_registry(url or section.registry, section.store) as registry:
        published = publish_mlflow(
            registry,
            f"{registered.name}@{registered.version}",
            section.mlflow,
            alias=section.alias,
            reports={name: run_dir / name for name in ("report.json", "report.html")},
        )
    mlflow = MlflowRegistration(
        tracking_uri=published.tracking_uri,
        name=published.name,
        version=published.version,
        run_id=published.run_id,
        created=published.created,
        alias=published.alias,
        alias_moved=published.alias_moved,
    )
    return report.model_copy(
        update={"registered": registered.model_copy(update={"mlflow": mlflow})}
    )


def write_outputs(report: GateReport, run_dir: Path) -> None:
    """``report.json``, ``junit.xml`` and ``report.html`` in the run folder, each atomically."""
    from onnxgate.gate._html import render_html
    from onnxgate.gate._junit import render_junit

    atomic_write_text(run_dir / "report.json", report.model_dump_json(indent=2) + "\n")
    atomic_write_text(run_dir / "junit.xml", render_junit(report))
    atomic_write_text(run_dir / "report.html", render_html(report))
