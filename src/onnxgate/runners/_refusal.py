"""A runtime's refusal, as answered by the settings applier or a script, turned into a GateError.

The applier (``_session.py``) and the scripts that run inside isolated environments cannot raise
onnxgate's errors: they answer ``{"error": KIND, "message": ..., "provider": ...}``. Every caller
turns that answer into the same error class with the same words, here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from onnxgate._opslib import EXTENSIONS
from onnxgate._words import setting
from onnxgate.compat.providers import install_hint, provided_by, short_name
from onnxgate.errors import (
    ConfigError,
    GateError,
    InternalError,
    ProviderFailed,
    ProviderUnavailable,
    RunFailed,
    RuntimeEnvError,
    SessionFailed,
)


def refusal(
    answer: Mapping[str, Any],
    *,
    runtime: str,
    what: str = "the model",
    providers: Sequence[str] = (),
) -> GateError:
    """The GateError for an ``error`` answer.

    Args:
        answer: ``{"error": KIND, "message": ..., "provider": ..., "hint": ...}`` (a hint when
            the applier knows what to do better than the kind does); kinds ``unavailable``,
            ``provider``, ``level``, ``library``, ``session``, ``run``.
        runtime: ``onnxruntime 1.24.1`` or ``onnxruntime-openvino 1.24.1``, for messages.
        what: the model, for messages.
        providers: the providers asked for, for messages.
    """
    kind = answer.get("error")
    message = str(answer.get("message") or "").strip()
    provider = str(answer.get("provider") or "")
    on = f" on {', '.join(providers)}" if providers else ""
    if kind == "unavailable" and answer.get("hint"):  # a plugin that offers no device here
        return ProviderUnavailable(f"{message}.", hint=str(answer["hint"]))
    if kind == "unavailable":
        return ProviderUnavailable(
            f"{message}; it comes with {provided_by(provider)}.",
            hint=install_hint(provider),
        )
    if kind == "provider":
        return ProviderFailed(
            f"{runtime}: {message}",
            hint=f"Nothing ran on CPU in its place. Check {provider}'s options "
            "(--providers NAME:KEY=VALUE) and run `onnxgate doctor --providers "
            f"{short_name(provider)}` with the same --runtime.",
        )
    if kind == "level":
        return ConfigError(
            f"{message}.", hint="Use --opt-level extended, or all (which includes layout)."
        )
    if kind == "library":
        return RuntimeEnvError(
            f"{runtime}: {message}.",
            hint="Give a library built for this platform and ONNX Runtime release "
            f"({setting('ops_libraries', ['PATH'])}).",
        )
    if kind == "session":
        return SessionFailed(
            f"{runtime} cannot create a session for {what}{on}: {message}",
            hint=_custom_op_hint(message)
            or "Run `onnxgate check` on the model for the reason and a fix.",
        )
    if kind == "run":
        return RunFailed(f"{runtime} failed on {what}{on}: {message}")
    return InternalError(f"{runtime} answered an unknown refusal {kind!r} for {what}: {message}")


# ONNX Runtime's words for an operator of a domain no registered kernel or library provides
_UNREGISTERED = re.compile(r"([A-Za-z_][\w.]*):(\w+)\(-?\d+\) is not a registered function/op")
_RUNTIME_DOMAINS = ("ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training", "com.microsoft")
_EXTENSIONS_DOMAIN = "ai.onnx.contrib"


def _custom_op_hint(message: str) -> str | None:
    """The library to register when the session failed on a custom-domain operator."""
    found = _UNREGISTERED.search(message)
    if found is None or found[1] in _RUNTIME_DOMAINS:
        return None
    library = EXTENSIONS if found[1] == _EXTENSIONS_DOMAIN else "PATH"
    return (
        f"{found[1]}:{found[2]} is a custom operator: register the library that implements it "
        f"in every session: {setting('ops_libraries', [library])}."
    )
