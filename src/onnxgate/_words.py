"""Settings named in the words of the interface in use: a command's flag, or a gate's key.

A hint that tells the user which setting to change is built from a neutral description: the
setting's path in the library's config (``feeds.dims``, ``reference``, ``second_opinion``) and,
where it helps, a value. Whoever drives the library says, for the length of a block, how its users
spell a setting (``speaking``): a command says ``--dim x[2]=SIZE``, a gate says
``[feeds] dims = { "x[2]" = [MIN, MAX] }``, and a Python caller, who set no words, reads the
config field (``feeds.dims``). The innermost block wins, so a gate run from the command line
speaks in gate keys.

Values are neutral too: ``feeds.dims`` takes the names of the dimensions (each interface writes
its own placeholder for their sizes), ``feeds.inputs`` nothing (a placeholder for a file) or the
file given, other settings the value to set (``"ort:disable"``, ``False``, a list, a mapping).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from onnxgate._pathtext import shown
from onnxgate.errors import ConfigError

Words = Callable[[str, object], str]
"""How an interface names a setting: ``(path, value) -> text``."""


def toml_key(name: str) -> str:
    """A TOML key: bare when it can be (``batch``), quoted otherwise (``"x[2]"``)."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):  # an inline table: { probabilities = [0.05, 0] }
        return (
            f"{{ {', '.join(f'{toml_key(str(k))} = {_toml_value(v)}' for k, v in value.items())} }}"
        )
    if isinstance(value, list | tuple):
        return f"[{', '.join(_toml_value(v) for v in value)}]"
    return json.dumps(value)


def library_words(path: str, value: object = None) -> str:
    """The config field, as a Python caller sets it: ``feeds.dims={'x[2]': [SIZE]}``."""
    if path == "feeds.dims" and isinstance(value, Sequence) and not isinstance(value, str):
        return f"{path}={{{', '.join(f'{d!r}: [SIZE]' for d in value)}}}"
    if path == "feeds.inputs":
        return f"{path}=FILE" if value is None else f"{path}={shown(str(value))!r}"
    return path if value is None else f"{path}={value!r}"


GATE_KEYS: dict[str, str] = {
    "reference": "steps.export.reference",
    "second_opinion": "steps.export.second_opinion",
    "against": "steps.compare.against",
    "localize": "steps.compare.localize",
    "require": "steps.placement.require",
    "allow_ops": "steps.placement.allow_ops",
    "vs": "steps.bench.vs",
    "batches": "steps.bench.batches",
    "time_budget": "steps.tune.time_budget",
    "eval": "steps.quantize.eval",
    "calibration": "steps.quantize.calibration",
    "labels": "steps.quantize.labels",
    "allow_slower": "steps.quantize.allow_slower",
    "batch_axis": "model.batch_axis",
    "dynamic": "model.dynamic",
    "example_inputs": "model.example_inputs",
    "opset": "model.opset",
    "exporter": "model.exporter",
    "dtype": "model.dtype",
    "paths": "model.paths",
    "custom_objects": "model.custom_objects",
    "tf_version": "model.tf_version",
    "tf2onnx_version": "model.tf2onnx_version",
    "keras_version": "model.keras_version",
    "ops_libraries": "targets.ops_libraries",
}
"""Settings that belong to one table whichever step meets them (``[model]``'s are the export's)."""


def gate_key(
    path: str,
    step: str | None = None,
    *,
    own_feeds: bool = False,
    from_feeds: Collection[str] = (),
) -> str:
    """The key of a setting in ``gate.toml``: ``[feeds] dims``, ``steps.export.reference``.

    Feeds are the top-level ``[feeds]`` table, which every step uses unless it overrides it
    (``own_feeds``: then they are ``steps.STEP.feeds.dims``); a setting of one step is that step's
    key; any other path is a key of ``step``'s table. A setting in ``from_feeds`` took its value
    from ``[feeds] inputs`` (quantize's ``eval`` when ``[steps.quantize] eval`` is not set), the
    key the user set it with.
    """
    if path in from_feeds:
        return "[feeds] inputs"
    if path.startswith("feeds.") and own_feeds and step:
        return f"steps.{step}.{path}"
    if path.startswith("feeds."):
        return f"[feeds] {path.removeprefix('feeds.')}"
    if path in GATE_KEYS:
        return GATE_KEYS[path]
    return f"steps.{step}.{path}" if step else path


def gate_words(
    path: str,
    value: object = None,
    *,
    step: str | None = None,
    own_feeds: bool = False,
    from_feeds: Collection[str] = (),
) -> str:
    """A setting as a line of ``gate.toml``: ``[feeds] dims = { "x[2]" = [MIN, MAX] }``.

    ``from_feeds``: settings whose value is ``[feeds] inputs`` (see ``gate_key``); without a
    value they are quoted as that key, which is set.
    """
    key = gate_key(path, step, own_feeds=own_feeds, from_feeds=from_feeds)
    if path == "feeds.dims" and isinstance(value, Sequence) and not isinstance(value, str):
        return f"{key} = {{ {', '.join(f'{toml_key(d)} = [MIN, MAX]' for d in value)} }}"
    if path == "feeds.inputs" and value is None:
        return f'{key} = "FILE"'
    if path in from_feeds or path == "feeds.inputs":
        return key if value is None else f"{key} = {json.dumps(shown(str(value)))}"
    return key if value is None else f"{key} = {_toml_value(value)}"


def gate_offers(path: str, keys: Collection[str]) -> bool:
    """Whether a gate has a key for a setting met by a step whose table has ``keys``.

    ``[feeds]`` and the settings of ``GATE_KEYS`` are keys wherever they are met; any other
    setting only when the step's table has it (a gate writes its quantised model where it
    chooses: ``steps.quantize`` has no ``out``).
    """
    return path.startswith("feeds.") or path in GATE_KEYS or path.split(".")[0] in keys


Offers = Callable[[str], bool]
"""Whether an interface has a word for a setting: ``path -> bool``."""

_WORDS: ContextVar[tuple[Words, Offers | None]] = ContextVar(
    "onnxgate_words", default=(library_words, None)
)


def setting(path: str, value: object = None) -> str:
    """How the interface in use names a setting (with a value or placeholder)."""
    return _WORDS.get()[0](path, value)


def offered(path: str) -> bool:
    """Whether the interface in use lets its user change a setting (a Python caller sets any).

    A hint offers a setting as a way out only when it is: a gate user told to set a key the
    gate does not have is sent to an error.
    """
    offers = _WORDS.get()[1]
    return offers is None or offers(path)


@contextmanager
def speaking(words: Words, offers: Offers | None = None) -> Iterator[None]:
    """Name settings with ``words`` inside the block (a command's flags, a gate's keys).

    ``offers`` says which settings the interface has a word for (None: every one).
    """
    token = _WORDS.set((words, offers))
    try:
        yield
    finally:
        _WORDS.reset(token)


def _named(path: str) -> re.Pattern[str]:
    # not a word inside a path (``../out/mnist``): a folder separator on either side keeps it
    return re.compile(rf"(?<![\w./\\-]){re.escape(path)}(?![\w/\\-]|\.\w)")


def renamed(error: ConfigError, name: Callable[[str], str | None]) -> ConfigError:
    """The error with the config fields it names (``field``, ``related``) in an interface's words.

    ``name`` gives a field's word (a flag, a gate key) or None to leave it. Only the fields the
    error declares are replaced, so prose that happens to contain a field's name is left alone.
    Renaming twice changes nothing.
    """
    message, hint = error.message, error.hint
    for path in sorted(error.fields, key=len, reverse=True):
        word = name(path)
        if word is None:
            continue
        message = _named(path).sub(word, message)
        hint = _named(path).sub(word, hint) if hint else hint
    if (message, hint) == (error.message, error.hint):
        return error
    copy = ConfigError(message, hint=hint, field=error.field, related=error.related)
    copy.__cause__ = error.__cause__
    return copy
