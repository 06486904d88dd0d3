"""Every request is held to the contract: names, datatype, rank, dims, proven ranges, values, size.

The rules are the contract's, not the graph's: a symbolic dimension accepts only the sizes the
golden samples proved (``signature.dims``), and an input with a value bound (token ids below the
vocabulary size) accepts only values inside it. Each refusal names the input and the rule, so a
client can fix its request without reading the server's log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from onnxgate.contract import Contract
from onnxgate.contract_store import DimBound, ValueBound
from onnxgate.errors import PayloadTooLarge
from onnxgate.model import TensorSpec
from onnxgate.serve._refuse import echo, refuse
from onnxgate.serve._tensors import datatype_of
from onnxgate.serve._types import RequestTensor

RULES = {
    "input.unknown": "an input the model does not take",
    "input.missing": "an input the model needs is not in the request",
    "input.duplicate": "an input is given twice",
    "datatype": "the declared datatype is not the input's",
    "rank": "the number of dims is not the input's",
    "dim.fixed": "a fixed dim has another size",
    "dim.range": "a symbolic dim is outside the sizes the contract proved",
    "dim.agree": "a symbolic dim has different sizes in two inputs",
    "value.range": "a value is outside the contract's bound for the input",
    "value.finite": "a float input holds NaN or an infinity where the contract bounds it",
    "size": "the request's tensors are above the server's limit",
}
"""Rule codes of request validation, as they appear at the end of a refusal's message."""


class RequestValidator:
    """Checks requests against one model's contract.

    Args:
        inputs: the model's inputs, as the contract's signature has them.
        dims: proven sizes of symbolic dims (``DimBound`` with min and max).
        values: value bounds per input.
        max_bytes: the limit on a request's tensors, in bytes.
    """

    def __init__(
        self,
        inputs: Sequence[TensorSpec],
        dims: Mapping[str, DimBound],
        values: Mapping[str, ValueBound],
        max_bytes: int,
    ) -> None:
        self.inputs = {spec.name: spec for spec in inputs}
        self.dims = dict(dims)
        self.values = dict(values)
        self.max_bytes = max_bytes
        self.datatypes = {spec.name: datatype_of(spec.dtype) for spec in inputs}

    @classmethod
    def from_contract(cls, contract: Contract, max_bytes: int) -> RequestValidator:
        """The validator of a contract's signature."""
        signature = contract.signature
        return cls(signature.inputs, signature.dims, signature.values, max_bytes)

    def sizes(self, feeds: Mapping[str, np.ndarray]) -> dict[str, int]:
        """The size every symbolic dim takes in (already validated) feeds."""
        found: dict[str, int] = {}
        for name, spec in self.inputs.items():
            for dim, size in zip(spec.shape or (), feeds[name].shape, strict=False):
                if isinstance(dim, str):
                    found[dim] = size
        return found

    def check(self, tensors: Sequence[RequestTensor]) -> dict[str, np.ndarray]:
        """The feeds of a request, each checked; raises on the first broken rule.

        Raises:
            InvalidRequest: a rule is broken; the message names the input and ends with the rule.
            PayloadTooLarge: the tensors together are above ``max_bytes``.
        """
        feeds: dict[str, np.ndarray] = {}
        total = 0
        for tensor in tensors:
            if tensor.name not in self.inputs:
                raise refuse(
                    "input.unknown",
                    f"input {echo(tensor.name)} is not an input of the model; it takes "
                    f"{', '.join(self.inputs)}",
                )
            if tensor.name in feeds:
                raise refuse("input.duplicate", f"input {echo(tensor.name)} is given twice")
            feeds[tensor.name] = self._one(tensor)
            total += tensor.array.nbytes
        missing = [name for name in self.inputs if name not in feeds]
        if missing:
            raise refuse("input.missing", f"input {missing[0]!r} is missing from the request")
        if total > self.max_bytes:
            raise PayloadTooLarge(
                f"the request's tensors take {total} bytes, above the server's limit of "
                f"{self.max_bytes} (rule size)"
            )
        self._agree(feeds)
        return feeds

    def _one(self, tensor: RequestTensor) -> np.ndarray:
        spec = self.inputs[tensor.name]
        want = self.datatypes[tensor.name]
        if tensor.datatype != want:
            raise refuse(
                "datatype",
                f"input {tensor.name!r} is {want}, the request declares {tensor.datatype}",
            )
        array = tensor.array
        shape = spec.shape
        if shape is not None:
            if array.ndim != len(shape):
                raise refuse(
                    "rank",
                    f"input {tensor.name!r} has {len(shape)} dims {_text(shape)}, the request "
                    f"has {array.ndim} {list(array.shape)}",
                )
            for axis, (dim, size) in enumerate(zip(shape, array.shape, strict=True)):
                if isinstance(dim, int) and dim > 0 and size != dim:
                    raise refuse(
                        "dim.fixed",
                        f"input {tensor.name!r} dim {axis} is {dim}, the request has {size}",
                    )
                if isinstance(dim, str) and dim:
                    self._in_range(tensor.name, axis, dim, size)
                elif not isinstance(dim, int) or dim <= 0:
                    # a dim without a name is proven as INPUT[AXIS]; unbounded when not recorded
                    self._in_range(tensor.name, axis, f"{tensor.name}[{axis}]", size)
        bound = self.values.get(tensor.name)
        if bound is not None and array.size and array.dtype != object:
            self._in_bound(tensor.name, array, bound)
        if spec.dtype == "string" and array.dtype == object:
            return _text_array(tensor.name, array)
        return array

    def _in_range(self, name: str, axis: int, dim: str, size: int) -> None:
        bound = self.dims.get(dim)
        low = bound.min if bound and bound.min is not None else 1
        high = bound.max if bound else None
        if size < low or (high is not None and size > high):
            proven = f"{low}..{high}" if high is not None else f"{low} or more"
            raise refuse(
                "dim.range",
                f"input {name!r} dim {axis} ({dim}) is {size}, outside the sizes the contract "
                f"proved ({proven})",
            )

    def _in_bound(self, name: str, array: np.ndarray, bound: ValueBound) -> None:
        """Values in ``[low, high)`` (the contract's ranges exclude ``high``), or ``low`` alone."""
        shown = f"{bound.low:g}" if bound.low == bound.high else f"[{bound.low:g}, {bound.high:g})"
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise refuse(
                "value.finite",
                f"input {name!r} holds NaN or an infinity; its values lie in {shown}",
            )
        low, high = array.min(), array.max()
        above = high > bound.high if bound.low == bound.high else high >= bound.high
        if low < bound.low or above:
            worst = low if low < bound.low else high
            why = f" ({bound.why})" if bound.why else ""
            raise refuse(
                "value.range", f"input {name!r} holds {worst.item()!r}, outside {shown}{why}"
            )

    def _agree(self, feeds: Mapping[str, np.ndarray]) -> None:
        seen: dict[str, tuple[int, str]] = {}
        for name, spec in self.inputs.items():
            for dim, size in zip(spec.shape or (), feeds[name].shape, strict=False):
                if not isinstance(dim, str):
                    continue
                if dim in seen and seen[dim][0] != size:
                    size0, first = seen[dim]
                    raise refuse(
                        "dim.agree",
                        f"dim {dim!r} is {size0} in input {first!r} and {size} in input {name!r}",
                    )
                seen.setdefault(dim, (size, name))


def _text(shape: Sequence[object]) -> str:
    return "[" + ", ".join("?" if d is None or d == "" else str(d) for d in shape) + "]"


def _text_array(name: str, array: np.ndarray) -> np.ndarray:
    """BYTES as the text an ONNX string tensor holds (UTF-8).

    ONNX Runtime would feed the model a ``bytes`` object's repr (``b'...'``).

    Raises:
        InvalidRequest: an element that is not UTF-8.
    """
    try:
        return np.vectorize(
            lambda v: v.decode("utf-8") if isinstance(v, bytes) else v, otypes=[object]
        )(array)
    except UnicodeDecodeError:
        raise refuse(
            "dtype.utf8", f"input {name!r} is a string tensor; an element is not UTF-8 text"
        ) from None
