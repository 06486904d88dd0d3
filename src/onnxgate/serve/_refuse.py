"""What both protocol front ends refuse alike, and how a refusal quotes what the client sent.

REST and gRPC decode different wires into one ``InferRequest``; everything a request can get
wrong in both is decided once: the contract's rules in ``serve._validate``, unknown models and
outputs in ``Hub``, and here the request's own shape (input and output names, the parameters
onnxgate does not implement). A front end only refuses on its own what the other cannot express
(a JSON body, an ``Inference-Header-Content-Length``, ``raw_input_contents``), so a request both
can carry gets one verdict and one message on both.

Every string a client chose and a refusal repeats (a name, a datatype, a path, a header) goes
through :func:`echo`, so an input named with 100,000 characters makes a short error: a small
JSON body, and a ``grpc-message`` trailer that fits the client's metadata limit.
"""

from __future__ import annotations

from collections.abc import Container

from onnxgate.errors import InvalidRequest

ECHO_LIMIT = 200
"""Characters of a client's string a refusal repeats; the rest is counted, not shown."""
MESSAGE_LIMIT = 2000
"""Characters of a whole refusal (a last bound, also on what the server names itself)."""

UNSUPPORTED_PARAMETERS = {
    "shared_memory_region": "shared memory is not supported here; send the data in the request",
    "classification": "classification is not supported here; ask for the raw output",
}
"""Parameters of Triton's extensions onnxgate does not implement, refused wherever they are."""


def echo(value: object, limit: int = ECHO_LIMIT) -> str:
    """``value`` quoted as a refusal shows it (``repr``), cut to ``limit`` characters.

    ``echo("ids")`` is ``'ids'``; a longer string keeps its first ``limit`` characters and says
    how long it was: ``'aaaa…'…(100000 chars)``.
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}…({len(value)} chars)"
    return clip(repr(value), limit)


def clip(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, with how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…({len(text)} chars)"


def refuse(rule: str, message: str) -> InvalidRequest:
    """An ``InvalidRequest`` whose message ends with its rule code."""
    return InvalidRequest(f"{message} (rule {rule})")


def with_rule(error: InvalidRequest, rule: str) -> InvalidRequest:
    """``error`` with ``rule`` at the end of its message, unless it already names one."""
    message = error.message.rstrip(".")
    if message.endswith(")") and "(rule " in message:
        return error
    return refuse(rule, message)


def tensor_name(where: str, index: int, name: object) -> str:
    """The name of ``inputs[index]`` or ``outputs[index]`` (``where``).

    Raises:
        InvalidRequest: it is not a non-empty string.
    """
    if not isinstance(name, str) or not name:
        rule = "input.name" if where == "inputs" else "outputs"
        raise refuse(rule, f"{where}[{index}] has no name (a non-empty string)")
    return name


def refuse_parameters(what: str, keys: Container[str]) -> None:
    """Refuse the parameters of extensions onnxgate does not implement.

    Args:
        what: the tensor they belong to, as a message names it (``input 'ids'``).
        keys: the tensor's parameter names.

    Raises:
        InvalidRequest: one of them is given.
    """
    for key, why in UNSUPPORTED_PARAMETERS.items():
        if key in keys:
            raise refuse("parameters", f"{what}: parameter {key!r}: {why}")


def unique(names: list[str]) -> list[str]:
    """``names`` with each asked for once, in the order first asked.

    An output asked for twice is answered once, as Triton does (its requested outputs are a set):
    the request is not contradictory, and a client built for Triton must get the same answer.
    """
    return list(dict.fromkeys(names)) if len(set(names)) != len(names) else names
