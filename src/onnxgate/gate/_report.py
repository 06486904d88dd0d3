"""The gate's verdict: one ``GateReport`` per run, written as ``report.json`` in the run folder.

Every step leaves one ``StepResult``: its status, the figures a person or a CI system compares
(``figures``, flat and small), and the step's own report in full (``report``), so nothing the
library measured is lost between the step and the page that shows it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

GATE_REPORT_FORMAT = "onnxgate.gate-report/1"

StepName = Literal[
    "check",
    "export",
    "compare",
    "verify",
    "placement",
    "tune",
    "quantize",
    "bench",
    "mobile",
    "web",
]
Status = Literal["passed", "failed", "inconclusive", "error", "not_run"]
"""``failed``: the step ran and its verdict is no; ``inconclusive``: it ran, but other load on the
machine spoiled the timings its verdict hangs on (``reason``), so it is neither yes nor no (its
``on_unreliable`` says whether that fails the gate); ``error``: it could not run (a
``GateError``, with its exit code); ``not_run``: disabled, or a step it depends on did not pass
(``reason``)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Artefact(_Strict):
    """One file the run produced, relative to the run folder."""

    role: str
    """``model``, ``contract``, ``golden``, ``model.int8``, ``contract.int8``, ``golden.int8`` ..."""
    path: str
    sha256: str
    size: int


class StepResult(_Strict):
    """What one step did."""

    name: StepName
    status: Status
    seconds: float = 0.0
    cached: bool = False
    """Taken from the cache: same artefact digest, config hash and runtime as an earlier run."""
    summary: str = ""
    """One line: what passed or failed, with its figure."""
    reason: str | None = None
    """Why it failed, errored or did not run (a step it depends on, by name)."""
    exit_code: int | None = None
    """With ``error``: the exit code of the ``GateError`` (2 usage, 3 environment, 4 internal)."""
    on_unreliable: Literal["warn", "fail"] | None = None
    """With ``inconclusive``: what the step's config said to do with it (``fail`` fails the
    gate, ``warn`` lets it pass)."""
    figures: dict[str, float | int | str | bool | None] = {}
    """Flat figures for tables and the registry: ``p50_ms``, ``speedup``, ``max_abs`` ..."""
    report: dict[str, Any] | None = None
    """The step's own report, as its ``model_dump(mode="json")``."""
    config_hash: str = ""
    """sha256 of the step's settings (and the artefact it read), its cache key with the runtime."""
    artefacts: list[Artefact] = []

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def fails_gate(self) -> bool:
        """The step makes the gate fail: failed, in error, or inconclusive where told to fail."""
        return self.status in ("failed", "error") or (
            self.status == "inconclusive" and self.on_unreliable == "fail"
        )


class Environment(_Strict):
    """Where the gate ran."""

    onnxgate: str
    onnxruntime: str
    onnx: str
    python: str
    platform: str
    cpu: str
    isa: list[str] = []
    """Instruction-set extensions that matter for speed: avx2, avx512f, avx512_vnni, amx ..."""
    cores: int
    fingerprint: str
    """sha256 (16 hex) of cpu, isa, cores, onnxruntime and platform: figures compare only within one."""


class MlflowRegistration(_Strict):
    """The MLflow model version a passing gate published (``[register] mlflow``)."""

    tracking_uri: str
    """The tracking server's URI, credentials masked."""
    name: str
    version: int
    run_id: str
    created: bool
    """False when the version had been published before (found by its tags)."""
    alias: str | None = None
    alias_moved: bool = False


class Registration(_Strict):
    """The registry version a passing gate created."""

    registry: str
    """The registry URL, password masked."""
    name: str
    version: int
    aliases: list[str] = []
    mlflow: MlflowRegistration | None = None
    """Where ``[register] mlflow`` published it."""


class GateReport(_Strict):
    """The whole verdict of one ``onnxgate gate`` run."""

    format: str = GATE_REPORT_FORMAT
    name: str
    """The model's name, from ``[model] name`` (the registry's name)."""
    passed: bool
    config_path: str
    config_hash: str
    config: dict[str, Any]
    """The config as validated, defaults filled in."""
    source: str
    """What the model came from: an ``.onnx`` path, ``torch:module:factory`` or an sklearn file."""
    model_sha256: str | None = None
    run_dir: str
    started: str
    """ISO 8601, UTC."""
    seconds: float
    environment: Environment
    steps: list[StepResult]
    artefacts: list[Artefact] = []
    registered: Registration | None = None
    notes: list[str] = []

    def step(self, name: str) -> StepResult | None:
        """The result of one step, or None when the config has no such step."""
        return next((s for s in self.steps if s.name == name), None)

    @property
    def failed_steps(self) -> list[str]:
        return [s.name for s in self.steps if s.fails_gate]

    @property
    def inconclusive_steps(self) -> list[str]:
        """Steps whose timings other load spoiled (whether or not that failed the gate)."""
        return [s.name for s in self.steps if s.status == "inconclusive"]
