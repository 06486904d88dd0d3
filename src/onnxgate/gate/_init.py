"""``onnxgate gate init``: a starter ``gate.toml`` with every step, commented, for one model.

The starter is meant to pass on a healthy model, and says how far that promise goes. For an .onnx
source, ``gate init`` runs the model once on the feeds the steps will use (``_probe``): with ONNX
Runtime, and with the reference evaluator on the smallest sample. What the probe found is set in
the file, each with a comment saying why: ``[feeds]`` left to fill when ONNX Runtime cannot run the
synthesized feeds, golden outputs and comparisons from ONNX Runtime without graph optimisations
when the evaluator cannot run the model. torch and scikit-learn sources are not probed (their
export happens in the gate), and the header says so. Thresholds are left for the user to set, and
the steps that need the user's data (quantize) or minutes (tune) say how to turn them on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from onnxgate._fs import atomic_write_text
from onnxgate._words import setting
from onnxgate.errors import ConfigError
from onnxgate.gate._config import load_config
from onnxgate.gate._probe import Probe
from onnxgate.gate._probe import probe as run_probe
from onnxgate.gate._starter import feeds_table, starter_text


def _batch_and_dims(source: str) -> tuple[bool, list[str]]:
    """Whether the first input has a symbolic batch axis, and the other symbolic dims."""
    from onnxgate.model import Signature, load_model

    loaded = load_model(source, load_weights=False)
    signature = Signature.from_graph(loaded.proto.graph)
    batch, others = False, []
    for spec in signature.inputs:
        for axis, dim in enumerate(spec.shape or ()):
            if isinstance(dim, str):
                if axis == 0 and spec is signature.inputs[0]:
                    batch = True
                elif dim not in others and dim != (signature.inputs[0].shape or [None])[0]:
                    others.append(dim)
    return batch, others


def _relative(path: str | Path, base: Path | None) -> str:
    """A path as the config writes it: relative to the config's folder when inside it."""
    resolved = Path(path).resolve()
    if base is not None and resolved.is_relative_to(base.resolve()):
        return os.path.relpath(resolved, base.resolve())
    return str(resolved)


def _source_kind(source: str) -> str:
    """``onnx``, ``torch`` or ``sklearn``, from the source's form.

    Raises:
        ConfigError: the source is none of them.
    """
    kind = (
        "torch"
        if source.startswith("torch:")
        else "sklearn"
        if source.startswith("sklearn:")
        else "onnx"
    )
    if kind == "onnx" and not source.endswith(".onnx"):
        raise ConfigError(
            f"{source!r} is not an .onnx file, torch:package.module:factory or "
            "sklearn:estimator.joblib."
        )
    return kind


def _serving_dims(dims: Mapping[str, Sequence[int]] | None) -> dict[str, list[int]]:
    """Each free dimension's serving range as a list, refused unless ``[MIN, MAX]`` or ``[SIZE]``.

    Raises:
        ConfigError: naming ``feeds.dims`` and the dimension.
    """
    dims_ = {name: list(sizes) for name, sizes in (dims or {}).items()}
    for name, sizes in dims_.items():
        if not 1 <= len(sizes) <= 2 or sizes != sorted(sizes) or min(sizes) < 1:
            raise ConfigError(
                f"feeds.dims {name}={','.join(map(str, sizes))} is not MIN,MAX or SIZE with "
                "sizes of 1 or more, MIN first.",
                field="feeds.dims",
            )
    return dims_


def starter_config(
    source: str,
    runtimes: Sequence[str] = (),
    *,
    base: Path | None = None,
    inputs: str | Path | None = None,
    dims: Mapping[str, Sequence[int]] | None = None,
    ranges: Mapping[str, str] | None = None,
    seed: int = 0,
    probe: bool | Probe = True,
    on_note: Callable[[str], None] | None = None,
) -> str:
    """The text of a starter ``gate.toml`` for ``source``.

    Paths inside ``base`` (the config's folder) are written relative to it.

    Args:
        source: an .onnx file, ``torch:package.module:factory`` or ``sklearn:estimator.joblib``.
        runtimes: other runtimes the model must run on (``onnxruntime==1.20.1``).
        base: the config's folder.
        inputs: real inputs for every step, written as ``[feeds] inputs``.
        dims: the serving range of free dimensions, ``{name: [MIN, MAX]}`` or ``[SIZE]``
            (``INPUT[AXIS]`` for a dimension without a name), written as ``[feeds] dims``.
        ranges: value ranges per input for synthetic feeds (``"LOW:HIGH"``), ``[feeds] ranges``.
        seed: the synthetic feeds' seed, ``[feeds] seed``.
        probe: run an .onnx model once first (``_probe.probe``) and set what it finds; False
            writes the defaults; a ``Probe`` already made is used as is.
        on_note: called with each thing the user should know (ONNX Runtime cannot run the feeds,
            the reference evaluator cannot run the model), as the starter's comments say it.

    Raises:
        ConfigError: the source is not an .onnx file, ``torch:`` entry or ``sklearn:`` file; a
            dimension is not ``[MIN, MAX]`` or names nothing in the model.
        ModelLoadError: the .onnx file cannot be read.
    """
    note = on_note or (lambda message: None)
    kind = _source_kind(source)
    dims = _serving_dims(dims)
    found: Probe | None = probe if isinstance(probe, Probe) else None
    free: list[str] | None = None
    if kind == "onnx":
        _, others = _batch_and_dims(source)
        if probe is True:
            found = run_probe(
                source,
                inputs=Path(inputs) if inputs is not None else None,
                dims=dims,
                ranges=ranges,
                seed=seed,
            )
        free = found.free if found is not None else others
        source = _relative(source, base)
    else:
        others = []
    if found is not None:
        _tell(found, note, given=inputs is not None or bool(dims))
    feeds = feeds_table(
        found,
        free,
        inputs=_relative(inputs, base) if inputs is not None else None,
        dims=dims,
        ranges=dict(ranges or {}),
        seed=seed,
    )
    return starter_text(kind, source, found, feeds, runtimes=runtimes, others=others)


def _tell(probe: Probe, note: Callable[[str], None], *, given: bool) -> None:
    """Say on the side what the starter's comments say, for a user who will not open it."""
    if not probe.loads:
        note(f"ONNX Runtime does not load the model: {probe.ort_error}")
    elif probe.ort_error is not None:
        fill = (
            "check [feeds] in the config"
            if given
            else '[feeds] is written for you to fill: inputs = "samples.npz", or dims'
        )
        note(f"ONNX Runtime cannot run the feeds: {probe.ort_error}; {fill}")
    if probe.reference_error is not None:
        note(
            f"the ONNX reference evaluator cannot run the model ({probe.reference_error}); "
            'written: [steps.export] reference = "ort:disable", second_opinion = false, '
            '[steps.compare] against = "ort:disable"'
        )
    elif probe.reference_skipped is not None:
        note(f"the ONNX reference evaluator was not probed: {probe.reference_skipped}")
    capped = [f"{k} at {r.high}, not {r.uncapped}" for k, r in probe.ranges.items() if r.uncapped]
    if capped:
        note(
            f"starter ranges capped by this machine's speed, not by the model: {'; '.join(capped)} "
            "(see the comment in [feeds]: a faster reference, or [feeds] dims, proves more)"
        )
    for d in probe.disagreements:
        if d.noise:
            note(
                f"the reference evaluator and ONNX Runtime without optimisations differ by float "
                f"noise on {d.text()}; written: [steps.export.tolerances] and "
                f"[steps.compare.tolerances] per_output {d.output} atol {d.atol:g}"
            )
        else:
            note(
                "the reference evaluator and ONNX Runtime without optimisations disagree beyond "
                f"float noise on {d.text()}; the export step will fail on it"
            )


def write_starter(
    source: str,
    out: Path,
    runtimes: Sequence[str] = (),
    *,
    force: bool = False,
    inputs: str | Path | None = None,
    dims: Mapping[str, Sequence[int]] | None = None,
    ranges: Mapping[str, str] | None = None,
    seed: int = 0,
    probe: bool = True,
    on_note: Callable[[str], None] | None = None,
) -> Path:
    """Write a starter config to ``out`` (atomically) after checking it validates.

    The keyword arguments are ``starter_config``'s.

    Raises:
        ConfigError: ``out`` exists (without ``force``), the source is not a model, or a
            dimension is malformed or names nothing in the model.
    """
    if out.exists() and not force:
        raise ConfigError(
            f"{out} exists.",
            hint=f"Give another {setting('out')}, or {setting('force', True)} to replace it.",
        )
    text = starter_config(
        source,
        runtimes,
        base=out.parent,
        inputs=inputs,
        dims=dims,
        ranges=ranges,
        seed=seed,
        probe=probe,
        on_note=on_note,
    )
    atomic_write_text(out, text)
    load_config(out)  # a starter that does not validate is a bug, caught here rather than later
    return out
