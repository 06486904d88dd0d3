"""``deploy check``: a Triton model repository against its ONNX models and their contracts.

Each ``config.pbtxt`` is parsed with Triton's own ``model_config_pb2`` (an unknown field or a bad
value is a parse error, as in Triton), then every version's model is read (as an untrusted file)
and the config is held against it: names, datatypes and ranks of inputs and outputs, fixed dims,
the batch axis ``max_batch_size`` implies, and every warm-up's inputs, shapes and data files.
Where the version folder holds the model's onnxgate contract, the config is also held against
what the contract proves: ``max_batch_size`` and warm-up shapes inside the proven ranges, every
output's dims able to hold the shape it had in each golden sample (a model may declare one shape
and produce another), the model file the one the contract describes, and each custom operator
library the contract requires named in ``model_operations`` and present, byte for byte, in the
model's folder. A model with an input or output that is not a
tensor fails whatever the config says (DPL025): Triton's ONNX Runtime backend reads every one of
them when it loads the model, and refuses sequences and maps.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from onnxgate.deploy._check_version import check_version
from onnxgate.deploy._findings import RULES as RULES
from onnxgate.deploy._findings import Finding as Finding
from onnxgate.deploy._findings import Findings, RepositoryCheck
from onnxgate.deploy._libraries import check_libraries

MAX_CONFIG_BYTES = 1 << 20
"""A config.pbtxt larger than this is refused unread."""
VERSION = re.compile(r"[0-9]+")
"""A version folder's name: ASCII digits (``str.isdigit`` also takes ``²``)."""


def check_repository(path: str | Path) -> RepositoryCheck:
    """Check a model repository (folders with a ``config.pbtxt``) or one model folder in it.

    Raises:
        ConfigError: ``path`` is not a folder.
    """
    from onnxgate.errors import ConfigError

    root = Path(path).expanduser()
    if not root.is_dir():
        raise ConfigError(
            f"{root}: not a folder; deploy check reads a Triton model repository.",
            hint="Give the repository (it holds MODEL/config.pbtxt) or one model folder.",
        )
    if (root / "config.pbtxt").exists():
        dirs = [root]
    else:
        dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    findings = Findings()
    models = []
    for model_dir in dirs:
        models.append(model_dir.name)
        _check_model(model_dir, findings)
    if not dirs:
        findings.add("DPL001", "error", str(root), "the repository holds no model folder")
    return RepositoryCheck(
        passed=not any(f.severity == "error" for f in findings.items),
        repository=str(root),
        models=models,
        findings=findings.items,
    )


def check_model_dir(model_dir: Path) -> RepositoryCheck:
    """Check one model folder (what ``deploy triton`` runs on what it wrote)."""
    return check_repository(model_dir)


def _check_model(model_dir: Path, found: Findings) -> None:
    """One model folder: its config, then each version the config's policy serves."""
    name = model_dir.name
    config = _read_config(model_dir / "config.pbtxt", name, found)
    if config is None:
        return
    if config.name and config.name != name:
        found.add(
            "DPL003", "error", name,
            f"the config's name is {config.name!r}, its folder {name!r}; Triton refuses to load it",
        )  # fmt: skip
    if config.platform not in ("", "onnxruntime_onnx") or config.backend not in ("", "onnxruntime"):
        found.add(
            "DPL004", "error", name,
            f"platform {config.platform!r}, backend {config.backend!r}: onnxgate checks ONNX "
            "Runtime models only",
        )  # fmt: skip
        return
    filename = config.default_model_filename or "model.onnx"
    if Path(filename).name != filename or filename in (".", ".."):
        found.add(
            "DPL005", "error", name,
            f"default_model_filename {filename!r} is not a file name in the version folder",
        )  # fmt: skip
        return
    try:
        versions = sorted(
            (p for p in model_dir.iterdir() if p.is_dir() and VERSION.fullmatch(p.name)),
            key=lambda p: int(p.name),
        )
    except OSError as err:
        found.add("DPL005", "error", name, f"{model_dir} cannot be listed: {err.strerror or err}")
        return
    served = _served(config, [int(v.name) for v in versions])
    for missing in sorted(served - {int(v.name) for v in versions}):
        found.add(
            "DPL005", "error", name,
            f"version_policy names version {missing}, which has no folder: Triton fails the load",
        )  # fmt: skip
    checked = 0
    contracts: dict[str, Any] = {}
    for version in versions:
        if int(version.name) not in served:
            continue
        model = version / filename
        if model.is_dir():  # Triton also takes a folder named model.onnx holding model.onnx
            model = model / filename
        if not model.is_file():
            found.add(
                "DPL005", "error", f"{name}/{version.name}",
                f"the version policy serves it, and it holds no {filename}: Triton fails to load it",
            )  # fmt: skip
            continue
        checked += 1
        contract = check_version(config, model_dir, version, model, found)
        if contract is not None:
            contracts[f"{name}/{version.name}"] = contract
    check_libraries(config, model_dir, contracts, found)
    if not versions or (not checked and not any(f.code == "DPL005" for f in found.items)):
        found.add(
            "DPL005", "error", name, f"no version folder (1/, 2/ ...) holds {filename}",
            "Put the model at MODEL/1/model.onnx.",
        )  # fmt: skip


def _read_config(path: Path, name: str, found: Findings) -> Any:
    """The ``ModelConfig`` parsed as Triton parses it, or None (DPL001, DPL002 found)."""
    from google.protobuf import text_format

    from onnxgate.deploy._proto import model_config_pb2

    if not path.is_file():
        found.add(
            "DPL001", "error", name, f"{path} is missing",
            "Write one (onnxgate deploy triton REF --out REPO), or rely on Triton's auto-complete "
            "knowingly.",
        )  # fmt: skip
        return None
    config = model_config_pb2.ModelConfig()
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            found.add(
                "DPL002", "error", name,
                f"{path} is {path.stat().st_size:,} bytes; a config is a few kB (limit "
                f"{MAX_CONFIG_BYTES:,})",
            )  # fmt: skip
            return None
        text_format.Parse(path.read_text(encoding="utf-8"), config)
    except OSError as err:
        found.add("DPL001", "error", name, f"{path} cannot be read: {err.strerror or err}")
        return None
    except (text_format.ParseError, UnicodeDecodeError) as err:
        found.add(
            "DPL002", "error", name, f"{path}: {err}",
            "Triton refuses the same config: fix the field named (model_config.proto).",
        )  # fmt: skip
        return None
    return config


def _served(config: Any, versions: list[int]) -> set[int]:
    """The versions Triton loads under the config's version_policy (latest 1 by default)."""
    policy = config.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return set(versions)
    if which == "specific":
        return set(policy.specific.versions)
    count = policy.latest.num_versions if which == "latest" else 1
    return set(sorted(versions)[-max(count, 1) :])
