"""A web app's files, proven in the browser it runs in: the work of ``deploy web`` and ``[steps.web]``.

``web_target`` writes into a new or empty folder:

- the model: ``NAME.onnx`` (weights kept in external data are embedded: a page fetches one
  file), or ``NAME.ort`` (``format = "ort"``), written by ONNX Runtime's converter through
  ``mobile``'s code, with its ``NAME.required_operators.config``;
- ``NAME.inputs.json``: the contract's input spec for a front-end developer (``SPEC_FORMAT``:
  names, dtypes as ``ort.Tensor`` takes them, shapes with the symbolic dims by name, the range
  each dim was proven at, the value range of token ids, the outputs);
- ``NAME.proof.json``: the proof. The contract's golden samples run on the file written, in
  ``onnxruntime-web`` in a headless Chromium (the ``wasm`` backend; ``runners`` drives it) and
  are judged by the contract's own rules (``compare_runners`` against the ``GoldenRunner``, as
  ``verify`` and ``deploy mobile`` judge); with the size, the runtime, the backend and the
  threads that really ran (as the page reported them, not as asked).

Everything is made in a staging folder inside the target folder (``_fs.staging``) and renamed
into it only when the proof passed: a web app never picks up a folder holding a model the browser did not
prove. A proof that fails leaves nothing behind and says which output missed by how much.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import onnx
from pydantic import BaseModel, ConfigDict, Field

from onnxgate._fs import fresh_folder, fsync_file, public_mode, staging
from onnxgate._pathtext import shown
from onnxgate._words import setting
from onnxgate.errors import ConfigError, SessionFailed
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.settings import Part

if TYPE_CHECKING:
    from onnxgate.runners.runtimes import RuntimeSpec

log = logging.getLogger(__name__)

WEB_RELEASE = "1.30.0"
"""The newest ``onnxruntime-web`` release onnxgate knows and was tested with: the default."""
SPEC_FORMAT = "onnxgate.web-inputs/1"
PROOF_FORMAT = "onnxgate.web-proof/1"
MB = 1e6
MAX_ONE_FILE = 2**31 - 2**20
"""Bytes one serialised ONNX file holds (protobuf's 2 GiB limit, with room for the graph)."""


class WebOptions(Part):
    """Which file a web app gets, and the browser runtime that proves it."""

    format: Literal["onnx", "ort"] = "onnx"
    """``onnx``: the model as gated; ``ort``: ONNX Runtime's ORT format (smaller to parse, what
    a minimal build of onnxruntime-web loads), with its required-operators config."""
    runtime: str = f"onnxruntime-web=={WEB_RELEASE}"
    """The browser runtime the proof runs on: ``onnxruntime-web==X.Y.Z``."""
    threads: int = Field(1, ge=1, le=64)
    """wasm threads the proof runs with (``ort.env.wasm.numThreads``; above 1 the page must be
    cross-origin isolated, as the proof's page is)."""


class WebReport(BaseModel):
    """What ``deploy web`` wrote and the browser's proof of it."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    source: str
    """The model, or the reference deployed (``deploy web``)."""
    gate: str | None = None
    out: str
    written: bool
    """The folder holds the files (only when the proof passed)."""
    files: list[str]
    model_file: str
    model_format: Literal["onnx", "ort"]
    sha256: str = ""
    """The model file written's (the contract names the gated model's)."""
    size_mb: float
    """The model file the page fetches."""
    runtime: str
    """The release that ran (``onnxruntime-web 1.30.0``), as the page reported it."""
    backend: str
    threads: int
    """wasm threads that really ran."""
    cross_origin_isolated: bool | None = None
    parity: str
    """The golden samples on the file written, judged by the contract's rules."""
    samples: int
    outputs: list[dict[str, Any]] = []
    """Per output: passed, max_abs, cosine and, when it failed, why."""
    notes: list[str] = []


def _dtype(spec: Any) -> str:
    """The element type as ``ort.Tensor`` names it (``float32``, ``int64``, ``bool``)."""
    return str(spec.dtype or spec.type or "unknown")


def input_spec(contract: Any, name: str, model_file: Path) -> dict[str, Any]:
    """The contract's signature as a front-end developer reads it (``SPEC_FORMAT``).

    Each input: ``name``, ``dtype`` (``ort.Tensor``'s type string), ``shape`` (an int for a
    fixed dim, the dim's name for a symbolic one), ``dims`` (each symbolic dim's proven
    ``min``/``max``: the sizes the golden samples ran at) and, where the contract bounds it,
    ``values`` (``low`` to ``high``, ``high`` excluded: token ids below the vocabulary; integers
    for an integer input). Each output: name, dtype, shape. ``sha256`` is the file written's,
    ``contract_sha256`` the gated model's its contract names (they differ when the file is
    converted or its external data embedded).
    """
    from onnxgate.contract import sha256_file

    signature = contract.signature

    def shape(spec: Any) -> list[int | str] | None:
        if spec.shape is None:
            return None
        return [d if isinstance(d, int) else str(d or "?") for d in spec.shape]

    inputs = []
    for spec in signature.inputs:
        entry: dict[str, Any] = {"name": spec.name, "dtype": _dtype(spec), "shape": shape(spec)}
        dims = {
            str(d): {"min": signature.dims[d].min, "max": signature.dims[d].max}
            for d in spec.shape or ()
            if isinstance(d, str) and d in signature.dims
        }
        if dims:
            entry["dims"] = dims
        bound = signature.values.get(spec.name)
        if bound is not None:
            whole = entry["dtype"].startswith(("int", "uint"))
            low, high = (int(bound.low), int(bound.high)) if whole else (bound.low, bound.high)
            entry["values"] = {"low": low, "high": high, "high_exclusive": True}
        inputs.append(entry)
    outputs = [
        {"name": spec.name, "dtype": _dtype(spec), "shape": shape(spec)}
        for spec in signature.served_outputs()
    ]
    return {
        "format": SPEC_FORMAT,
        "model": model_file.name,
        "sha256": sha256_file(model_file),
        "contract_sha256": contract.identity.model.sha256,
        "inputs": inputs,
        "outputs": outputs,
    }


def web_runtime(text: str) -> RuntimeSpec:
    """``text`` as a release of ``onnxruntime-web``: the only runtime the web target runs on.

    ``deploy web`` checks it before any work, the gate as its config loads
    (``[steps.web] runtime``).

    Raises:
        ConfigError: ``text`` is no runtime, or not a release of ``onnxruntime-web``.
    """
    from onnxgate.runners.runtimes import RuntimeSpec

    spec = RuntimeSpec.parse(text)
    if spec.package != "onnxruntime-web" or spec.version is None:
        raise ConfigError(
            f"the web target is proven in a browser: {text} is not a release of onnxruntime-web.",
            hint=f"Give {setting('runtime', f'onnxruntime-web=={WEB_RELEASE}')}.",
            field="runtime",
        )
    return spec


def refuse_native_libraries(contract: Any, spec: RuntimeSpec, where: str) -> None:
    """Refuse a model whose contract records custom operator libraries: a browser loads none.

    The model's custom-domain nodes run only in a session that registered a native shared
    library, and ``onnxruntime-web`` (WebAssembly) cannot load one, so such a model is refused
    before anything is written or any browser started.

    Raises:
        ConfigError: naming the libraries and the runtime.
    """
    libraries = [lib.name for lib in contract.requirements.ops_libraries]
    if not libraries:
        return
    raise ConfigError(
        f"{where}: its contract records the custom operator "
        f"librar{'ies' if len(libraries) > 1 else 'y'} {', '.join(libraries)}, which {spec} "
        "cannot load: ONNX Runtime's JavaScript packages load no native shared libraries, so "
        "the model's custom-domain nodes cannot run in a browser.",
        hint="Serve the model where ONNX Runtime loads the library (onnxgate serve, deploy "
        "triton or deploy kserve), or export it without the custom operators and do that work "
        "in the web app's own code.",
        field="ops_libraries",
    )


def web_target(
    model: str | Path,
    options: WebOptions | None = None,
    *,
    out: Path,
    name: str | None = None,
    progress: Callable[[str], None] | None = None,
    source: str | None = None,
    gate: str | None = None,
    notes: list[str] | None = None,
) -> WebReport:
    """Write ``model`` for a web app into ``out``, proven on ``onnxruntime-web`` in Chromium.

    Args:
        model: an ONNX model beside its contract.
        options: the file written and the runtime that proves it.
        out: a folder that does not exist yet, or is empty (the files are renamed into it from
            a staging folder inside it; the folder itself is never replaced).
        name: the stem of the files written; default the model's.
        progress: called with a short message before slow steps.
        source: where the model came from, as the report and the proof name it (``deploy
            web``: the reference deployed); default the model file.
        gate: the source's gate verdict, when known.
        notes: notes about the source, said before the target's own.

    Raises:
        ConfigError: the runtime is not an ``onnxruntime-web`` release; the model does not fit
            in one file.
        ModelLoadError, HollowContract: the model or its contract is missing, damaged or empty.
        ParityError: the contract does not describe the model (its identity failed).
        SessionFailed: the browser's runtime cannot load the model (its error, named).
        RuntimeEnvError: Node.js, npm or Chromium is missing (exit 3, with the install line).
    """
    from onnxgate.contract import admitted

    options = options or WebOptions()
    out = fresh_folder(out)
    say = progress or (lambda message: log.info("%s", message))
    spec = web_runtime(options.runtime)
    loaded = load_model(model)
    contract, admission = admitted(loaded)
    refuse_native_libraries(contract, spec, shown(loaded.path))
    stem = name or loaded.path.stem
    with staging(out, "web") as folder:
        notes = list(notes or [])
        model_file = _write_model(loaded, folder, stem, options, notes, say)
        spec_doc = input_spec(contract, stem, model_file)
        (folder / f"{stem}.inputs.json").write_text(json.dumps(spec_doc, indent=2) + "\n")
        say(f"proving {model_file.name} on {spec} in Chromium ({options.threads} wasm thread(s))")
        proof = prove_in_browser(model_file, loaded, admission, contract, spec, options.threads)
        files = sorted([*(p.name for p in folder.iterdir()), f"{stem}.proof.json"])
        report = WebReport(
            passed=proof["passed"],
            source=source or shown(loaded.path),
            gate=gate,
            out=shown(out),
            written=False,
            files=files,
            model_file=model_file.name,
            model_format=options.format,
            sha256=spec_doc["sha256"],
            size_mb=round(model_file.stat().st_size / MB, 6),
            runtime=proof["runtime"],
            backend=proof["backend"],
            threads=proof["threads"],
            cross_origin_isolated=proof.get("cross_origin_isolated"),
            parity=proof["parity"],
            samples=proof["samples"],
            outputs=proof["outputs"],
            notes=notes,
        )
        if not report.passed:
            return report  # nothing is written: the staging folder goes
        report = report.model_copy(update={"written": True})
        # the folder's own record: no path outside it (a gate's cached step restores it into
        # another run's folder), the source named as given, or by the model file's name
        document = {
            "format": PROOF_FORMAT,
            **report.model_dump(mode="json", exclude={"out"}),
            "source": source or loaded.path.name,
        }
        (folder / f"{stem}.proof.json").write_text(json.dumps(document, indent=2) + "\n")
        _publish(folder, out)
        return report


def _write_model(
    loaded: LoadedModel,
    staging: Path,
    name: str,
    options: WebOptions,
    notes: list[str],
    say: Callable[[str], None],
) -> Path:
    """The model file the page fetches, in ``staging``: ``NAME.onnx`` or ``NAME.ort``."""
    if options.format == "ort":
        from onnxgate.mobile import convert, place_converted

        say(f"converting {loaded.path.name} to the ORT format")
        with tempfile.TemporaryDirectory(prefix=".convert-", dir=staging) as folder:
            made = convert(loaded, Path(folder), name=name, style="Fixed", type_reduction=False)
            place_converted(made, staging, converted_in=Path(folder))
        notes.append(
            "ORT format (Fixed optimisation style, for the wasm backend); "
            f"{name}.required_operators.config lists the operators a minimal build needs"
        )
        return staging / f"{name}.ort"
    target = staging / f"{name}.onnx"
    if loaded.external_data:
        if loaded.size_bytes + loaded.external_bytes >= MAX_ONE_FILE:
            raise ConfigError(
                f"{shown(loaded.path)}: with its external data it is "
                f"{(loaded.size_bytes + loaded.external_bytes) / MB:.0f} MB, and one ONNX file "
                "holds under 2 GB: deploy web writes the model as one file a page fetches.",
                hint="Deploy it to a server (`deploy triton`), or make it smaller "
                "(`onnxgate quantize`) first.",
            )
        proto = onnx.load(os.fspath(loaded.path), load_external_data=True)
        data = proto.SerializeToString()
        notes.append(
            f"the weights kept in {len(loaded.external_files)} external data file(s) are "
            "embedded: a page fetches one file"
        )
        target.write_bytes(data)
    else:
        shutil.copyfile(loaded.path, target)
    return target


def prove_in_browser(
    model_file: Path,
    loaded: LoadedModel,
    admission: Any,
    contract: Any,
    spec: Any,
    threads: int,
) -> dict[str, Any]:
    """The golden samples on ``model_file`` in ``onnxruntime-web``, judged by the contract's rules.

    Raises:
        SessionFailed: the runtime cannot load the file (naming the runtime and its error).
    """
    from dataclasses import replace

    from onnxgate.compare import compare_runners
    from onnxgate.contract import GoldenRunner, parity_summary
    from onnxgate.runners import open_runner
    from onnxgate.settings import SessionSettings

    signature = Signature.from_graph(loaded.proto.graph)
    samples = [sample for sample, _ in admission.expected]
    produced_by = contract.golden.produced_by if contract.golden else ""
    golden = GoldenRunner(admission.expected, produced_by, signature)
    # the runner opens the file written (its path); the graph is the gated one's (the same)
    written = replace(loaded, path=model_file, external_data=())
    candidate = open_runner(written, SessionSettings(threads=threads), runtime=str(spec))
    try:
        compared = compare_runners(
            candidate, golden, samples, signature=signature, tolerances=admission.tolerances
        )
    except SessionFailed as err:
        raise SessionFailed(
            f"{spec} cannot load {model_file.name} (from {shown(loaded.path)}): {err.message}",
            hint="The browser's build has no kernel for an operator or type in it: "
            f"`onnxgate check {shown(loaded.path)} -r {spec}` lists what blocks it; "
            "or deploy it to a server (`deploy triton`).",
        ) from err
    ran = compared.ran.get("candidate")
    applied = dict(ran.settings) if ran is not None else {}
    outputs = [
        {
            "name": o.name,
            "passed": o.passed,
            "max_abs": o.max_abs,
            "cosine": getattr(o, "cosine", None),
            **({"reason": o.reason} if not o.passed else {}),
        }
        for o in compared.outputs
    ]
    parity = parity_summary(compared, len(samples))
    return {
        "passed": compared.passed,
        "runtime": f"{ran.runtime} {ran.version}" if ran is not None else str(spec),
        "backend": str(applied.get("backend", "wasm")),
        "threads": int(applied.get("intra_op_threads") or 0),
        "cross_origin_isolated": applied.get("cross_origin_isolated"),
        "parity": parity,
        "samples": len(samples),
        "outputs": outputs,
    }


def _publish(folder: Path, out: Path) -> None:
    """Each file of the staging ``folder`` synced and renamed into ``out``; the proof last."""
    for path in sorted(folder.iterdir(), key=lambda p: p.name.endswith(".proof.json")):
        public_mode(path)
        fsync_file(path)
        os.replace(path, out / path.name)
