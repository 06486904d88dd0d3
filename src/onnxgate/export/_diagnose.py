"""Why an exporter failed, in words: the operator, where it is called, and what to do.

The exporters' own messages are long and generic; the operator and the user's line are buried in
chained exceptions. ``diagnose`` reads the chain, and ``locate`` asks torch.export's node metadata
for the submodule and source line of the first failing operator.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from onnxgate._words import setting
from onnxgate.errors import ExportError, ExtraMissing

log = logging.getLogger("onnxgate.export._torch")


def torch_module() -> Any:
    """The torch package, or ExtraMissing naming the extra to install."""
    try:
        import torch  # noqa: TID251  (the PyTorch exporter)
    except ImportError as err:
        raise ExtraMissing(
            f"exporting from PyTorch needs the 'torch' extra ({err.name or 'torch'} is not "
            "installed).",
            extra="torch",
        ) from err
    return torch


_NO_FUNCTION = re.compile(
    r"No ONNX function found for <OpOverload\(op='([\w.]+)', overload='(\w+)'\)>"
)
_TARGET = re.compile(r"call_function\[target=torch\.ops\.((?:aten|prims)\.\w+)(?:\.\w+)?\]")
_TORCHSCRIPT_OP = re.compile(
    r"Exporting the operator '(\w+::\w+)' to ONNX opset version \d+ is not supported"
)
_USER_LINE = re.compile(r'File "([^"]+)", line (\d+), in (\w+)\n\s+(.+)')


def failing_ops(text: str) -> list[str]:
    """Operators an exporter could not translate, named as the exporter names them."""
    found = [m[0] for m in _NO_FUNCTION.findall(text)] + _TORCHSCRIPT_OP.findall(text)
    if not found:
        found = _TARGET.findall(text)
    return list(dict.fromkeys(found))


def locate(module: Any, args: tuple[Any, ...], ops: Sequence[str]) -> str | None:
    """Where in the module the first failing op is called: module path and source line.

    Best effort, through torch.export's node metadata; None when it cannot be known.
    """
    torch = torch_module()
    try:
        with quiet_exporter():
            program = torch.export.export(module, args, strict=False)
    except Exception:  # if the module cannot even be captured, there is no node to point at
        return None
    wanted = {op.replace("::", ".") for op in ops}
    for node in program.graph.nodes:
        target = str(node.target).rsplit(".", 1)[0] if node.op == "call_function" else ""
        if target not in wanted:
            continue
        stack = node.meta.get("nn_module_stack") or {}
        path = list(stack.values())[-1][0] if stack else ""
        trace = (node.meta.get("stack_trace") or "").strip().splitlines()
        line = trace[-1].strip() if trace else ""
        where = f"module self.{path}" if path else "forward()"
        return f"{where}" + (f", at `{line}`" if line else "")
    return None


def diagnose(
    error: BaseException, exporter: str, *, module: Any = None, args: tuple[Any, ...] = ()
) -> ExportError:
    """An ExportError that names what failed, where when it can be known, and what to do."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", f"{type(error).__name__}: {error}")
    cause = error.__cause__
    while cause is not None:  # the operator is often named only in a chained exception
        text += f"\n{type(cause).__name__}: {cause}"
        cause = cause.__cause__
    ops = failing_ops(text)
    if ops:
        where = locate(module, args, ops) if module is not None else None
        return ExportError(
            f"the {exporter} exporter cannot translate {', '.join(ops)}"
            + (f" (in {where})" if where else "")
            + ".",
            hint="Rewrite that part of forward() with supported operations, register a custom "
            "translation (torch.onnx.export's custom_translation_table), or try the other "
            f"exporter ({setting('exporter', 'torchscript')} or dynamo). -v shows the exporter's "
            "full trace.",
        )
    user = _USER_LINE.search(text)
    at = f" (in {user[3]}(), {user[1]}:{user[2]}: `{user[4].strip()}`)" if user else ""
    if re.search(r"GuardOnDataDependent|data.dependent|Could not guard", text):
        return ExportError(
            f"the {exporter} exporter cannot trace control flow that depends on tensor values{at}.",
            hint="Replace a Python `if` on tensor values with torch.where or torch.cond, or export "
            f"with {setting('exporter', 'torchscript')} (which bakes in the branch the example "
            "takes).",
        )
    inner = error
    while inner.__cause__ is not None:
        inner = inner.__cause__
    detail = f"{type(inner).__name__}: {inner}" if inner is not error else text
    return ExportError(
        f"the {exporter} exporter failed{at}: {_first(detail)}",
        hint=f"Run with -v for the exporter's full trace; {setting('exporter', 'torchscript')} "
        "may work where dynamo does not.",
    )


def _first(text: str, limit: int = 300) -> str:
    line = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """Keep the exporters' own log lines and warnings off the terminal unless -vv."""
    if log.isEnabledFor(logging.DEBUG):
        yield
        return
    names = (
        "torch",
        "torch.onnx",
        "torch.export",
        "torch._dynamo",
        "torch.fx",
        "onnxscript",
        "onnx_ir",
    )
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
