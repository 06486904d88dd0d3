"""What ``deploy check`` reports: its rule codes, one finding, the repository's result."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Severity = Literal["error", "warning", "info"]

RULES: dict[str, str] = {
    "DPL001": "config.pbtxt is missing",
    "DPL002": "config.pbtxt does not parse as Triton's ModelConfig",
    "DPL003": "the config's name is not its folder's",
    "DPL004": "not an ONNX Runtime model (platform/backend)",
    "DPL005": "no version folder holds the model file",
    "DPL006": "the model file cannot be read",
    "DPL010": "a config tensor the model does not have",
    "DPL011": "a model input the config does not list",
    "DPL012": "datatype differs from the model's",
    "DPL013": "the batch dimension counted twice (max_batch_size > 0 and dims repeat it)",
    "DPL014": "rank differs from the model's",
    "DPL015": "a fixed dim differs from the model's",
    "DPL016": "max_batch_size > 0 but the model's axis 0 is not a free batch dim",
    "DPL017": "max_batch_size beyond the batch the contract proves",
    "DPL018": "a dim fixed in the config outside the range the contract proves",
    "DPL019": "an output's dims contradict what the model produced (the contract's golden outputs)",
    "DPL020": "a warm-up input the config does not list, or a config input a warm-up misses",
    "DPL021": "a warm-up datatype or dims that differ from the config's",
    "DPL022": "a warm-up shape outside the range the contract proves, or its batch too large",
    "DPL023": "a warm-up data file missing or of the wrong size",
    "DPL024": "no warm-up: Triton calls the model ready before it has run once",
    "DPL025": "a model input or output that is not a tensor (a sequence, a map: scikit-learn's "
    "ZipMap): Triton's ONNX Runtime backend refuses to load the model",
    "DPL026": "an output's label_filename missing, or not one label per element of its last axis",
    "DPL027": "a custom operator library model_operations names is missing from the model's "
    "folder, or is not the file the contract requires (sha256); a warning: a Python extension "
    "module, which a tritonserver process cannot load",
    "DPL028": "a custom operator library the contract requires that model_operations does not name",
    "DPL030": "the model is not the one its contract describes",
    "DPL031": "no contract beside the model: proven ranges not checked",
}
"""Rule codes of ``deploy check``, with what each means."""


class Finding(BaseModel):
    """One mismatch or fact, where it is and what to do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str
    severity: Severity
    message: str
    where: str
    """The model folder, version or tensor it is about."""
    hint: str | None = None


class RepositoryCheck(BaseModel):
    """What ``deploy check`` found."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    """No finding of severity error."""
    repository: str
    models: list[str]
    findings: list[Finding] = []


class Findings:
    """The findings of one check, in the order they were found."""

    def __init__(self) -> None:
        self.items: list[Finding] = []

    def add(
        self, code: str, severity: Severity, where: str, message: str, hint: str | None = None
    ) -> None:
        self.items.append(
            Finding(code=code, severity=severity, where=where, message=message, hint=hint)
        )
