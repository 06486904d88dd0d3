"""Config fields in this CLI's words: the flag that sets each one.

Library messages name config fields (``feeds.dims``, ``session.threads``); ``FLAGS`` is the one
table that turns them into this CLI's flags (``--dim``, ``--threads``), filled where each flag
is declared (``flag_option``), as the command modules are imported. ``cli_words`` and
``cli_offers`` are the words every command speaks (``onnxgate._words.speaking``, entered by
``_common.handles_errors``), ``translated`` renames the fields of an error. It imports nothing of
the CLI, so ``_common`` and ``_options`` both take it from here.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import typer

from onnxgate._pathtext import shown
from onnxgate._words import library_words, renamed
from onnxgate.errors import ConfigError

FLAGS: dict[str, str] = {}
"""The flag of each config field, by its path in the step's config, as ``flag_option`` recorded
it where the flag is declared. A path not listed falls back to its tail (``session.threads`` →
``threads``), so a part built alone is named the same way."""


OFF_FLAGS: dict[str, str] = {}
"""The flag that turns a setting off where it is not ``--no-`` and the on flag's name (recorded by
``flag_option``)."""


def flag_option(field: str, *decls: str, flag: str | None = None, **options: Any) -> Any:
    """``typer.Option(*decls, **options)``, recording that the option sets the config ``field``.

    Where a command declares the flag of a config field, it says which field: that is how
    ``FLAGS`` (and ``OFF_FLAGS``) learn the words of this CLI, with no table typed beside the
    declarations. The flag named is ``flag``, else the first of ``decls`` (``--write`` of
    ``--write/--no-write``); an off switch other than ``--no-`` and its name (``--per-tensor``
    of ``--per-channel/--per-tensor``) goes to ``OFF_FLAGS``.

    Raises:
        ValueError: the field was declared before with another flag (one field, one flag).
    """
    on, _, off = decls[0].partition("/")
    named = flag or on
    if FLAGS.setdefault(field, named) != named:
        raise ValueError(f"{field} is set by {FLAGS[field]} and by {named}: one flag per field")
    if off and off != "--no-" + on.removeprefix("--"):
        OFF_FLAGS[field.rsplit(".", 1)[-1]] = off
    return typer.Option(*decls, **options)


def declare_flags(app: typer.Typer) -> None:
    """Run the option declarations of every command of ``app`` and its groups now.

    A command's options are annotations of its function, which ``from __future__ import
    annotations`` leaves unevaluated until typer builds the command; evaluated here, when the CLI
    is imported, ``FLAGS`` is whole before any message needs a flag.
    """
    for command in app.registered_commands:
        if command.callback is not None:
            typing.get_type_hints(command.callback, include_extras=True)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            declare_flags(group.typer_instance)


def flag_for(path: str) -> str | None:
    """The flag of a config field path, or None when this CLI has none."""
    parts = path.split(".")
    for start in range(len(parts)):
        tail = ".".join(parts[start:])
        if tail in FLAGS:
            return FLAGS[tail]
        for prefix in ("session.", "feeds.", "tolerances."):
            if prefix + tail in FLAGS:
                return FLAGS[prefix + tail]
    return None


def cli_words(path: str, value: object = None) -> str:
    """A setting as this CLI's flag (``--dim x[2]=SIZE``, ``--reference ort:disable``).

    The words commands speak (``onnxgate._words.speaking``); a setting without a flag is named by
    its config field. A switch is named by the flag that sets it to ``value``: ``--allow-slower``
    for True, ``--no-bench`` or ``--per-tensor`` for False; a list by the flag once per item;
    per-output tolerances (``{"probabilities": (0.05, 0)}``) as ``--tol probabilities:0.05,0``.
    """
    flag = flag_for(path)
    if flag is None:
        return library_words(path, value)
    if path == "feeds.dims" and isinstance(value, list | tuple):
        return " ".join(f"{flag} {name}=SIZE" for name in value)
    if path == "feeds.inputs":
        return f"{flag} {'FILE' if value is None else shown(str(value))}"
    if path.endswith("tolerances.per_output") and isinstance(value, Mapping):
        return " ".join(f"{flag} {name}:{atol:g},{rtol:g}" for name, (atol, rtol) in value.items())
    if isinstance(value, bool):
        if flag.startswith("--no-"):
            return flag if not value else f"no {flag}"
        if value:
            return flag
        return OFF_FLAGS.get(path.rsplit(".", 1)[-1], "--no-" + flag.removeprefix("--"))
    if value is None:
        return flag
    if isinstance(value, list | tuple):
        return " ".join(f"{flag} {item}" for item in value)
    return f"{flag} {value}"


def cli_offers(path: str) -> bool:
    """Whether a command has a flag for a setting (the settings ``cli_words`` names by flag)."""
    return flag_for(path) is not None


def translated(error: ConfigError) -> ConfigError:
    """The error with the config fields it names shown as this CLI's flags (see ``renamed``)."""
    return renamed(error, flag_for)
