"""What each ONNX and ONNX Runtime release can read: IR version and opset limits.

Two sources, kept apart so a reader can tell a published claim from a measurement:
- ONNX releases come from ``onnx.helper.VERSION_TABLE`` of the installed onnx package.
- ONNX Runtime releases come from the compatibility table ONNX Runtime published (1.0 to 1.20)
  and from limits *measured* by loading one-node models in that release (see ``runtime.py``).
  Measurements shipped with onnxgate live in ``data/ort_limits.json``; releases a user probes
  are added from the cache. Where both exist for a release, the measurement wins.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources

from onnx import OperatorSetIdProto, helper
from packaging.version import InvalidVersion, Version

from onnxgate.errors import CompatibilityError

DEFAULT_DOMAIN = "ai.onnx"
ML_DOMAIN = "ai.onnx.ml"


STANDARD_DOMAINS = frozenset({DEFAULT_DOMAIN, ML_DOMAIN, "ai.onnx.preview.training"})
"""Domains whose operators the onnx package defines."""


def normalize_domain(domain: str) -> str:
    """The canonical name of an operator domain: ``""`` and ``ai.onnx`` are the same."""
    return DEFAULT_DOMAIN if domain in ("", DEFAULT_DOMAIN) else domain


def proto_domain(domain: str) -> str:
    """The spelling protos and ``onnx.defs`` use: ``""`` for the default domain."""
    return "" if normalize_domain(domain) == DEFAULT_DOMAIN else domain


def opset_map(imports: Iterable[OperatorSetIdProto]) -> dict[str, int]:
    """Opset imports as ``{canonical domain: version}``."""
    return {normalize_domain(o.domain): o.version for o in imports}


def parse_release(text: str, *, what: str = "release") -> Version:
    """A release number read by PEP 440's rules (``packaging.version.Version``).

    ``1.20.0rc1`` < ``1.20.0`` < ``1.20.0.post1`` < ``1.20.1``, and ``1.21.0.dev20240101`` comes
    before ``1.21.0``'s release candidates: the order pip uses. ``1.16`` equals ``1.16.0``.

    Args:
        text: the version string, such as ``1.16.3``.
        what: what the string is, for the message (``ONNX Runtime release``).

    Raises:
        CompatibilityError: ``text`` is not a version number.
    """
    try:
        return Version(text)
    except (InvalidVersion, TypeError) as err:
        raise CompatibilityError(
            f"{what} {text!r} is not a version number.",
            hint="Use a release number such as 1.16.3 (PEP 440: 1.20.0rc1 and 1.21.0.dev0 work too).",
        ) from err


def release_key(version: str) -> Version:
    """Sort key of a release number: ``1.16.3`` -> ``Version('1.16.3')`` (see ``parse_release``).

    Raises:
        CompatibilityError: ``version`` is not a version number.
    """
    return parse_release(version)


@dataclass(frozen=True)
class OnnxRelease:
    """An ONNX release and the newest IR and opsets it writes."""

    release: str
    ir_version: int
    opset: int
    ml_opset: int


@cache
def onnx_releases() -> tuple[OnnxRelease, ...]:
    """ONNX releases known to the installed onnx package, oldest first."""
    return tuple(OnnxRelease(row[0], row[1], row[2], row[3]) for row in helper.VERSION_TABLE)


def min_ir_for_opset(opset: int) -> int:
    """The IR version of the first ONNX release that wrote ``opset`` (at least 3)."""
    for release in onnx_releases():
        if release.opset >= opset:
            return max(3, release.ir_version)
    return onnx_releases()[-1].ir_version


@dataclass(frozen=True)
class RuntimeLimits:
    """The newest IR and opsets one ONNX Runtime release loads.

    ``source`` is ``published`` (ONNX Runtime's compatibility table) or ``probed`` (measured by
    onnxgate loading one-node models in that release).
    """

    release: str
    max_ir: int
    max_opsets: dict[str, int]
    source: str
    min_opset: int = 7

    def admits(self, ir_version: int, opsets: dict[str, int]) -> bool:
        """Whether a model of this IR and these opsets is within the limits."""
        if ir_version > self.max_ir:
            return False
        for domain, version in opsets.items():
            limit = self.max_opsets.get(normalize_domain(domain))
            if limit is not None and version > limit:
                return False
        return True


# ONNX Runtime's published compatibility table (docs/reference/compatibility.md on the
# onnxruntime.ai site), release -> (IR, ai.onnx opset, ai.onnx.ml opset). It ends at 1.20.
PUBLISHED_ORT_TABLE: tuple[tuple[str, int, int, int], ...] = (
    ("1.0", 6, 11, 2), ("1.1", 6, 11, 2), ("1.2", 6, 11, 2), ("1.3", 7, 12, 2),
    ("1.4", 7, 12, 2), ("1.5", 7, 12, 2), ("1.6", 7, 13, 2), ("1.7", 7, 13, 2),
    ("1.8", 7, 14, 2), ("1.9", 8, 15, 2), ("1.10", 8, 15, 2), ("1.11", 8, 16, 2),
    ("1.12", 8, 17, 3), ("1.13", 8, 17, 3), ("1.14", 8, 18, 3), ("1.15", 8, 19, 3),
    ("1.16", 9, 19, 3), ("1.17", 9, 20, 4), ("1.18", 10, 21, 4), ("1.19", 10, 21, 4),
    ("1.20", 10, 21, 4),
)  # fmt: skip


def published_limits() -> tuple[RuntimeLimits, ...]:
    """The published table as limits."""
    return tuple(
        RuntimeLimits(rel, ir, {DEFAULT_DOMAIN: op, ML_DOMAIN: ml}, "published")
        for rel, ir, op, ml in PUBLISHED_ORT_TABLE
    )


@cache
def shipped_probed_limits() -> tuple[RuntimeLimits, ...]:
    """Limits measured by onnxgate's probe and shipped with the package."""
    text = resources.files("onnxgate.compat").joinpath("data/ort_limits.json").read_text()
    return tuple(limits_from_dict(row) for row in json.loads(text)["releases"])


def limits_from_dict(row: dict) -> RuntimeLimits:
    """Rebuild limits from their JSON form."""
    return RuntimeLimits(
        release=row["release"],
        max_ir=row["max_ir"],
        max_opsets=dict(row["max_opsets"]),
        source=row.get("source", "probed"),
        min_opset=row.get("min_opset", 7),
    )


def limits_to_dict(limits: RuntimeLimits) -> dict:
    """The JSON form of limits."""
    return {
        "release": limits.release,
        "max_ir": limits.max_ir,
        "max_opsets": limits.max_opsets,
        "min_opset": limits.min_opset,
        "source": limits.source,
    }


def known_limits(extra: tuple[RuntimeLimits, ...] = ()) -> tuple[RuntimeLimits, ...]:
    """Every release whose limits are known, oldest first; measurements override the table.

    A published row names a minor release (``1.16``); a probed row a patch release (``1.16.3``).
    Probed rows replace the published row of their minor release.
    """
    probed = {row.release: row for row in (*shipped_probed_limits(), *extra)}
    probed_minors = {release_key(rel).release[:2] for rel in probed}
    rows = [
        row
        for row in published_limits()
        if release_key(row.release).release[:2] not in probed_minors
    ]
    rows.extend(probed.values())
    return tuple(sorted(rows, key=lambda row: release_key(row.release)))


@dataclass(frozen=True)
class MinRuntime:
    """The oldest known ONNX Runtime release that loads a model, and how that is known."""

    release: str | None
    source: str | None
    reason: str

    def to_dict(self) -> dict[str, str | None]:
        """JSON form."""
        return {"onnxruntime": self.release, "source": self.source, "reason": self.reason}


def min_runtime(
    ir_version: int, opsets: dict[str, int], extra: tuple[RuntimeLimits, ...] = ()
) -> MinRuntime:
    """The oldest known ONNX Runtime release whose IR and opset limits admit the model.

    Only ``ai.onnx`` and ``ai.onnx.ml`` have release limits; other domains are judged by
    kernel coverage in ``check``.
    """
    standard = {
        normalize_domain(d): v
        for d, v in opsets.items()
        if normalize_domain(d) in (DEFAULT_DOMAIN, ML_DOMAIN)
    }
    needs = ", ".join([f"IR {ir_version}"] + [f"{d} {v}" for d, v in sorted(standard.items())])
    for row in known_limits(extra):
        if row.admits(ir_version, standard):
            return MinRuntime(row.release, row.source, f"first release admitting {needs}")
    return MinRuntime(None, None, f"no known ONNX Runtime release admits {needs}")
