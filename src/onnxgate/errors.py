"""The GateError hierarchy and the exit codes the CLI maps it to.

Every failure a user can cause or meet is one of these, raised where the problem is found, with a
message that names the file, node, input or provider concerned and says what to do next. The CLI
turns them into one line on stderr (or a JSON document) and a documented exit code; it never
prints a traceback for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum

from onnxgate._install import install_hint


def first_line(error: BaseException, limit: int = 500, *, with_type: bool = False) -> str:
    """A foreign exception's text on one line, cut at ``limit`` characters, for messages."""
    text = " ".join(str(error).split())
    if with_type or not text:
        text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ExitCode(IntEnum):
    """Stable exit codes of every onnxgate command."""

    PASSED = 0
    """The command ran and whatever it checked passed."""
    FAILED = 1
    """The command ran and a check, comparison or gate failed."""
    USAGE = 2
    """Bad usage or bad input: an unknown option, a malformed, unsafe or unreadable model."""
    ENVIRONMENT = 3
    """The environment cannot do what was asked: a missing extra, provider or runtime."""
    INTERNAL = 4
    """onnxgate itself failed (a bug): never a verdict about the model."""


class GateError(Exception):
    """Root of every error onnxgate raises on purpose."""

    exit_code: ExitCode = ExitCode.USAGE
    code: str = "error"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} {self.hint}" if self.hint else self.message

    def to_dict(self) -> dict[str, object]:
        """The error as a JSON-ready mapping, for ``--format json``."""
        return {
            "error": self.code,
            "message": self.message,
            "hint": self.hint,
            "exit_code": int(self.exit_code),
        }


class ConfigError(GateError):
    """An option or configuration value is wrong (unknown provider, malformed spec, typo).

    ``field`` is the path of the config value at fault (``feeds.dims``, ``session.threads``),
    and ``related`` other fields the message names: the message names them by these paths, and
    the CLI shows its flags in their place (``--dim``, ``--threads``), the gate its keys.
    """

    code = "config"

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        field: str | None = None,
        related: Sequence[str] = (),
    ) -> None:
        super().__init__(message, hint=hint)
        self.field = field
        self.related = tuple(related)

    @property
    def fields(self) -> tuple[str, ...]:
        """Every config path the message names: ``field`` first."""
        return ((self.field,) if self.field else ()) + self.related

    def to_dict(self) -> dict[str, object]:
        """The error as a JSON-ready mapping, with the field at fault."""
        return super().to_dict() | {"field": self.field}


class ModelLoadError(GateError):
    """A model file cannot be read: missing, not a protobuf, truncated, not ONNX, too large."""

    code = "model-load"


class UnsafeModelError(ModelLoadError):
    """A model file asks for something that must not be done, such as reading outside its folder."""

    code = "unsafe-model"


class FeedError(GateError):
    """Input data does not fit the model: a missing, extra or misnamed input, a wrong dtype or rank."""

    code = "feed"


class CompatibilityError(GateError):
    """Version knowledge is missing or contradictory for what was asked."""

    code = "compatibility"


class EnvironmentProblem(GateError):
    """The machine cannot do what was asked: a runtime, provider or extra is missing or broken."""

    exit_code = ExitCode.ENVIRONMENT
    code = "environment"


class ResourceExhausted(EnvironmentProblem):
    """A write met a full disk, a full quota, a read-only or forbidden folder or the open-file limit.

    ENOSPC, EDQUOT, EROFS, EACCES, EPERM, EMFILE, ENFILE, or SQLite's "database or disk is full": the user's
    condition to fix, not a bug (exit 3). Raised where onnxgate writes (``onnxgate._fs.resource_error`` builds it from an ``OSError``),
    after the write is undone: temporary files removed, the database transaction rolled back.
    ``path`` is the file or folder being written.
    """

    code = "resource-exhausted"

    def __init__(self, message: str, *, hint: str | None = None, path: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path

    def to_dict(self) -> dict[str, object]:
        """The error as a JSON-ready mapping, with the path being written."""
        return super().to_dict() | {"path": self.path}


class RuntimeEnvError(EnvironmentProblem):
    """An isolated ONNX Runtime environment could not be created or probed."""

    code = "runtime-env"


class ExtraMissing(EnvironmentProblem):
    """An optional dependency group is needed and not installed.

    ``extra`` names the group (``serve``) or groups; the hint then starts with the pip command
    that installs it in the form that fits how onnxgate was installed (an editable checkout, a
    local folder, a package from an index: ``onnxgate._install``), followed by ``hint`` if given.
    Every raise site passes ``extra``, None only for what no extra provides (a minimal
    onnxruntime build, a database driver onnxgate does not support).
    """

    code = "extra-missing"

    def __init__(
        self,
        message: str,
        *,
        extra: str | Sequence[str] | None = None,
        hint: str | None = None,
    ) -> None:
        if extra is not None:
            hint = " ".join(filter(None, (install_hint(extra), hint)))
        super().__init__(message, hint=hint)
        self.extras = [extra] if isinstance(extra, str) else list(extra or ())

    def to_dict(self) -> dict[str, object]:
        """The error as a JSON-ready mapping, with the extras to install."""
        return super().to_dict() | {"extras": self.extras}


class ProviderUnavailable(EnvironmentProblem):
    """An execution provider was asked for that this ONNX Runtime build does not include."""

    code = "provider-unavailable"


class ProviderFailed(EnvironmentProblem):
    """A provider the build includes did not start (bad options, no device).

    ONNX Runtime would have run the model without it; onnxgate refuses instead of running silently
    on CPU.
    """

    code = "provider-failed"


class ReferenceFailed(EnvironmentProblem):
    """The ONNX reference evaluator crashed on a model ONNX Runtime may well run: its fault, not the model's."""

    code = "reference-failed"


class InternalError(GateError):
    """onnxgate's own code failed (a crashed timing worker, an unexpected exception in a step).

    Exit 4, so CI never reads a bug in the tool as a verdict on the model.
    """

    exit_code = ExitCode.INTERNAL
    code = "internal"


class RunFailed(GateError):
    """A runner could not build a session for the model, or failed while running it."""

    exit_code = ExitCode.FAILED
    code = "run-failed"


class SessionFailed(RunFailed):
    """The runtime refused to create a session for the model (it does not load)."""

    code = "session-failed"


class ExportError(GateError):
    """An exporter failed, or produced a model that breaks what was asked (a fixed dynamic axis)."""

    exit_code = ExitCode.FAILED
    code = "export-failed"


class ParityError(GateError):
    """An exported model disagrees with its source at some shape."""

    exit_code = ExitCode.FAILED
    code = "parity"


class CheckFailed(GateError):
    """A check ran and found error-severity problems (raised only by callers that want raising)."""

    exit_code = ExitCode.FAILED
    code = "check-failed"


class RegistryUnreachable(EnvironmentProblem):
    """The model registry's database cannot be reached or opened (the URL is shown, password masked)."""

    code = "registry-unreachable"


class MlflowUnreachable(RegistryUnreachable):
    """An MLflow tracking server cannot be reached or failed (its URI shown, credentials masked)."""

    code = "mlflow-unreachable"


class NotFound(GateError):
    """A registered model, version or alias that was named does not exist."""

    code = "not-found"


class MlflowNotFound(NotFound):
    """A model, version or alias named on an MLflow tracking server does not exist there."""

    code = "mlflow-not-found"


class PromotionRefused(GateError):
    """An alias was asked for a version whose gate did not pass (``--force --reason`` overrides)."""

    exit_code = ExitCode.FAILED
    code = "promotion-refused"


class ShadowRefused(PromotionRefused):
    """``promote --when-shadow-passes`` and the shadow verdict failed or is inconclusive.

    The message names the output, its rule and on how many requests it failed, or why the
    traffic does not yet decide (too few requests, a bucket short, the champion moved).
    """

    code = "shadow-refused"


class ArtefactCorrupt(GateError):
    """An artefact's bytes are not the ones recorded: a missing, truncated or changed file."""

    exit_code = ExitCode.FAILED
    code = "artefact-corrupt"


class RequestRefused(GateError):
    """A server request refused on purpose; ``status`` says how both protocols answer it.

    ``invalid`` → HTTP 400 / gRPC ``INVALID_ARGUMENT``, ``not_found`` → 404 / ``NOT_FOUND``,
    ``too_large`` → 413 / ``RESOURCE_EXHAUSTED``, ``unavailable`` → 503 / ``UNAVAILABLE``.
    """

    status = "invalid"
    code = "request-refused"


class InvalidRequest(RequestRefused):
    """A request does not fit the model's contract (datatype, rank, dims, values) or the protocol."""

    code = "invalid-request"


class ModelNotServed(RequestRefused):
    """A request names a model or version this server does not serve."""

    status = "not_found"
    code = "model-not-served"


class PayloadTooLarge(RequestRefused):
    """A request is larger than the server's limit."""

    status = "too_large"
    code = "payload-too-large"


class Unavailable(RequestRefused):
    """The model is not ready, its queue is full, or the server is shutting down."""

    exit_code = ExitCode.ENVIRONMENT
    status = "unavailable"
    code = "unavailable"


class NotGated(GateError):
    """A model to serve has no passing gate (``--allow-ungated`` serves it anyway)."""

    exit_code = ExitCode.FAILED
    code = "not-gated"


class DataFileError(FeedError):
    """A data file cannot be read as data: empty, truncated, malformed, too large, or unsafe.

    Raised by the one reader of users' ``.npy``, ``.npz``, JSON and TensorProto ``.pb`` files
    (``onnxgate.data._files``), naming the file and the archive member or JSON key at fault.
    """

    code = "data-file"


class HollowContract(GateError):
    """A deployment contract that would prove nothing, or less than its rules' floors.

    No golden samples, outputs left out, impossible dims, or rules weaker than their floor
    (``onnxgate.contract.RULE_FLOORS``). ``findings`` holds each refusal as ``(code, message)`` with a stable ``CON`` code. Exit 2: the
    contract is unusable input, as a damaged one is; nothing was verified.
    """

    code = "hollow-contract"

    def __init__(
        self, message: str, *, hint: str | None = None, findings: Sequence[tuple[str, str]] = ()
    ) -> None:
        super().__init__(message, hint=hint)
        self.findings = list(findings)

    def to_dict(self) -> dict[str, object]:
        """The error as a JSON-ready mapping, with every finding and its code."""
        return super().to_dict() | {
            "findings": [{"code": code, "message": text} for code, text in self.findings]
        }


class ContractKeyError(GateError):
    """A contract signing or verifying key is set but unusable.

    Unreadable, malformed, of the wrong type, or set twice; the message names the environment
    variable.
    """

    code = "contract-key"


class ContractKeyMissing(EnvironmentProblem):
    """A signature is required and no key is configured in the environment.

    Raised by ``contract sign`` and ``verify --require-signature``.
    """

    code = "contract-key-missing"


class NativeCrash(GateError):
    """The model made onnx's or ONNX Runtime's native code abort or crash in a step.

    A C++ assertion or a bad memory access in a step that reads the model (shape inference, the
    checker, session creation) kills the process outright: no exception reaches Python. The CLI
    runs each command in a child process and reports the step the child died in with exit 2,
    since a malformed model made the native code fail.
    """

    code = "native-crash"
