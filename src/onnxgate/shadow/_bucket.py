"""Which proven shape bucket a request falls in: how a shadow verdict asks for coverage.

A contract proves its model at the sizes its golden samples were made at (``batch`` 1 and 8,
``sequence`` 16 and 128). Traffic at batch 3 is covered by the proof at 8 as far as any proof
covers it, so a request's bucket rounds each symbolic dim UP to the nearest proven size
(``batch<=8,sequence<=128``); the registry's verdict asks for a minimum of pairs per bucket, so a
candidate judged only on short sentences is not called good on long ones. A size beyond every
proven one (the validator refuses those, unless the contract declares a wider range) is its own
bucket, ``batch>8``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from onnxgate.contract_store import Contract

ANY = "any"
"""The bucket of every request to a model without symbolic dims."""


class Buckets:
    """A contract's proven sizes, ready to bucket many requests (what ``bucket_of`` builds).

    Args:
        contract: the contract whose golden samples proved the sizes, or a mapping of each
            symbolic dim to the sizes proved, with ``axes`` saying where each dim is in the
            inputs.
        axes: ``{input: [dim name or None per axis]}``, needed only with a mapping.
    """

    def __init__(
        self,
        contract: Contract | Mapping[str, Sequence[int]],
        axes: Mapping[str, Sequence[str | None]] | None = None,
    ) -> None:
        if isinstance(contract, Contract):
            signature = contract.signature
            samples = contract.golden.samples if contract.golden else []
            proved: dict[str, set[int]] = {name: set() for name in signature.dims}
            for sample in samples:
                for name, size in sample.dims.items():
                    proved.setdefault(name, set()).add(int(size))
            axes = {
                spec.name: [
                    _dim_key(spec.name, axis, dim) for axis, dim in enumerate(spec.shape or ())
                ]
                for spec in signature.inputs
            }
            sizes = {name: sorted(found) for name, found in proved.items()}
        else:
            sizes = {name: sorted({int(s) for s in found}) for name, found in contract.items()}
        self.sizes = sizes
        """Each symbolic dim's proven sizes, smallest first."""
        self._where = [
            (name, axis, dim)
            for name, dims in (axes or {}).items()
            for axis, dim in enumerate(dims)
            if dim is not None and dim in sizes
        ]

    def __call__(self, feeds: Mapping[str, Any]) -> str:
        """The bucket of one request's feeds."""
        seen: dict[str, int] = {}
        for name, axis, dim in self._where:
            value = feeds.get(name)
            shape = getattr(value, "shape", None)
            if shape is not None and axis < len(shape) and dim not in seen:
                seen[dim] = int(shape[axis])
        if not seen:
            return ANY
        parts = []
        for dim in sorted(seen):
            size, proved = seen[dim], self.sizes[dim]
            above = next((p for p in proved if p >= size), None)
            if above is not None:
                parts.append(f"{dim}<={above}")
            elif proved:
                parts.append(f"{dim}>{proved[-1]}")
            else:  # a dim no golden sample fixed: its size is the bucket
                parts.append(f"{dim}={size}")
        return ",".join(parts)


def bucket_of(
    contract: Contract | Mapping[str, Sequence[int]],
    feeds: Mapping[str, Any],
    axes: Mapping[str, Sequence[str | None]] | None = None,
) -> str:
    """The proven shape bucket of a request: each symbolic dim rounded up to a proven size.

    Args:
        contract: the contract (its golden samples' sizes), or ``{dim: proven sizes}``.
        feeds: the request's inputs by name (anything with a ``shape``).
        axes: with a mapping, ``{input: [dim name or None per axis]}``.

    Returns:
        ``batch<=8,sequence<=128`` (dims in name order), ``batch>8`` beyond every proven size,
        or ``any`` for a model without symbolic dims.
    """
    return Buckets(contract, axes)(feeds)


def _dim_key(input_name: str, axis: int, dim: int | str | None) -> str | None:
    """The name ``[feeds] dims`` gives a free axis (``images[2]`` when unnamed); None if fixed."""
    if isinstance(dim, int) and dim > 0:
        return None
    if isinstance(dim, str) and dim:
        return dim
    return f"{input_name}[{axis}]"
