"""What the registry returns: frozen pydantic records, JSON-ready, free of any database session.

Rows never leave the registry: a caller gets these records, so nothing it holds can lazy-load
after the session closed, and ``--format json`` is ``model_dump(mode="json")``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, computed_field

from onnxgate.errors import ConfigError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""A registered model's name: it becomes file names on fetch, so no separators."""
ALIAS = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
"""An alias starts with a letter, so ``name@3`` (a version) and ``name@prod`` never collide."""
LATEST = "latest"
"""Not an alias: ``name@latest`` is the newest version."""

VersionStatus = Literal["ready", "failed"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelVersion(_Record):
    """One registered version, as the gate and ``registry list`` see it."""

    name: str
    number: int
    status: VersionStatus
    """``ready`` when its gate passed, ``failed`` when it was registered with a failed gate."""
    passed: bool
    aliases: tuple[str, ...] = ()
    created_at: datetime
    created_by: str
    artefacts: dict[str, str]
    """sha256 by role (``model``, ``contract``, ``golden``, ``model.int8`` ...)."""

    @property
    def ref(self) -> str:
        """``name@number``, the reference that always names this version."""
        return f"{self.name}@{self.number}"


class ArtefactRecord(_Record):
    """One file of a version."""

    role: str
    filename: str
    """The file's name when it was registered."""
    sha256: str
    size: int


class StepRecord(_Record):
    """One step of a gate run."""

    name: str
    status: str
    seconds: float
    summary: str
    reason: str | None = None
    figures: dict[str, Any] = {}


class GateRunRecord(_Record):
    """A gate run over a version's artefacts (the first one registered the version)."""

    id: int
    passed: bool
    started: str
    seconds: float
    fingerprint: str
    config_hash: str
    recorded_at: datetime
    steps: list[StepRecord]


class PerformanceRecord(_Record):
    """Figures measured on one machine fingerprint by one gate step."""

    fingerprint: str
    step: str
    figures: dict[str, Any]
    recorded_at: datetime
    run_id: int | None = None


class PromotionRecord(_Record):
    """A move of an alias."""

    alias: str
    version: int
    previous: int | None
    forced: bool
    reason: str | None
    by: str
    at: datetime
    evidence: dict[str, Any] | None = None
    """What the move rests on beyond the gate: a shadow verdict's figures (``kind: shadow``)."""


class ShadowRunRecord(_Record):
    """A shadow run the version took part in, as the candidate or as the champion."""

    id: int
    role: Literal["candidate", "champion"]
    """The shown version's part in the run."""
    candidate: str
    """``NAME@N`` of the version judged on traffic."""
    champion: str
    """``NAME@N`` of the version it ran beside."""
    host: str
    started_at: datetime
    last_at: datetime | None = None
    pairs: int
    """Requests judged (every pair ever added, kept or pruned)."""
    failed: int
    """Requests with any output outside its rule."""


class VersionDetail(_Record):
    """Everything recorded about one version (``registry show``)."""

    version: ModelVersion
    description: str | None = None
    tags: dict[str, str] = {}
    source: dict[str, Any] = {}
    artefacts: list[ArtefactRecord]
    gate_runs: list[GateRunRecord]
    performance: list[PerformanceRecord] = []
    promotions: list[PromotionRecord] = []
    """Alias moves onto this version, forced ones with their reason."""
    shadow_runs: list[ShadowRunRecord] = []
    """Shadow runs of this version as the candidate, then as the champion, oldest first."""


class ModelSummary(_Record):
    """A registered model (``registry list``)."""

    name: str
    description: str | None = None
    tags: dict[str, str] = {}
    versions: int
    latest: int | None
    aliases: dict[str, int] = {}
    """Version number by alias."""
    updated_at: datetime


class FetchedFile(_Record):
    """A file ``fetch`` wrote, re-hashed after writing."""

    role: str
    path: str
    sha256: str
    size: int


class FetchResult(_Record):
    """What ``fetch`` materialised, and where."""

    version: ModelVersion
    out: str
    files: list[FetchedFile]

    @property
    def model_path(self) -> str | None:
        """The main model's path (what ``onnxgate verify`` takes), when the version has one."""
        return next((f.path for f in self.files if f.role == "model"), None)


class FsckProblem(_Record):
    """One inconsistency: a version naming a missing or damaged blob, a gap, a dangling alias."""

    kind: str
    """``missing-blob``, ``bad-size``, ``bad-sha256``, ``missing-artefacts``, ``no-gate-run``,
    ``gap``, ``dangling-alias``."""
    where: str
    """``name@N role``, ``name@alias`` or ``name``."""
    detail: str


class FsckReport(_Record):
    """The verdict of ``registry fsck``."""

    registry: str
    store: str
    models: int
    versions: int
    artefacts: int
    blobs: int
    blob_bytes: int
    hashed: bool
    """Whether every referenced blob's sha256 was recomputed (else sizes alone were checked)."""
    problems: list[FsckProblem] = []
    orphans: list[str] = []
    """Blobs no version refers to (a registration killed before its commit, or in progress)."""
    temp_files: list[str] = []
    """Temporary files in the store (a write in progress, or one a kill interrupted)."""
    stray: list[str] = []
    """Files in the blob folder that are not named by a sha256."""
    removed: list[str] = []

    @computed_field  # type: ignore[prop-decorator]
    @property
    def consistent(self) -> bool:
        """No version lacks or mis-references anything (orphans and temp files are harmless)."""
        return not self.problems

    @property
    def passed(self) -> bool:
        """Same as ``consistent``."""
        return self.consistent


def check_name(name: str) -> str:
    """Return ``name`` if it is a valid registered-model name.

    Raises:
        ConfigError: it is empty, too long or has characters other than letters, digits, ``._-``.
    """
    if not NAME.match(name or ""):
        raise ConfigError(
            f"{name!r} is not a valid model name.",
            hint="Use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit.",
        )
    return name


def check_alias(alias: str) -> str:
    """Return ``alias`` if it is a valid alias.

    Raises:
        ConfigError: it does not start with a letter, is too long, or is the reserved ``latest``.
    """
    if not ALIAS.match(alias or "") or alias == LATEST:
        raise ConfigError(
            f"{alias!r} is not a valid alias.",
            hint="An alias is 1-64 letters, digits, '_' or '-', starting with a letter "
            "(e.g. champion, prod); 'latest' is reserved for the newest version.",
        )
    return alias


def parse_ref(ref: str) -> tuple[str, int | str | None]:
    """Split ``NAME``, ``NAME@NUMBER``, ``NAME@ALIAS`` or ``NAME@latest``.

    Returns:
        The name, and the version number, the alias, or None for the latest version.

    Raises:
        ConfigError: the reference is malformed.
    """
    name, sep, which = ref.partition("@")
    check_name(name)
    if not sep or which == LATEST:
        return name, None
    if which.isdigit():
        return name, int(which)
    if not ALIAS.match(which):
        raise ConfigError(
            f"{ref!r} is not a version reference.",
            hint="Use NAME (the latest version), NAME@NUMBER (NAME@3) or NAME@ALIAS (NAME@champion).",
        )
    return name, which
