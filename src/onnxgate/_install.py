"""The pip command that installs an extra, in the form that fits how onnxgate was installed.

``pip install 'onnxgate[serve]'`` is right for a package from an index and wrong for a checkout:
there it asks the index for an onnxgate that may not exist, or installs a different one over the
checkout. The form is read from the distribution's PEP 610 record (``direct_url.json``): an
editable checkout gets ``pip install -e '/path/to/checkout[serve]'`` (so does a checkout's
``src`` on ``sys.path``: the package runs from ``ROOT/src/onnxgate`` beside
``ROOT/pyproject.toml``), a local folder installed without ``-e``
``pip install '/path/to/checkout[serve]'``, a VCS or archive URL
``pip install 'onnxgate[serve] @ URL'``, and a package from an index (no record)
``pip install 'onnxgate[serve]'``.

Standard library only: ``errors.py`` builds every ``ExtraMissing`` hint with it.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from urllib.parse import urlparse

DISTRIBUTION = "onnxgate"

CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
"""PyTorch's index of CPU-only wheels: a bare ``torch`` requirement can pull a multi-GB CUDA
build."""


def install_command(
    extras: str | Sequence[str],
    *,
    dist: metadata.Distribution | None = None,
    running: Path | None = None,
) -> str:
    """``pip install ...`` for ``extras``, as this onnxgate was installed.

    Args:
        extras: One extra (``serve``) or several (``["torch", "examples"]``).
        dist: The installed distribution; default: ``onnxgate``'s, if any.
        running: The folder of the ``onnxgate`` package that is running; default: this one.

    Returns:
        One shell command, quoted for POSIX shells.
    """
    names = ",".join([extras] if isinstance(extras, str) else extras)
    running = running or Path(__file__).resolve().parent
    checkout = _checkout_of(running)
    if checkout is not None:  # an editable install of it, or its src/ on sys.path
        return f"pip install -e {shlex.quote(f'{checkout}[{names}]')}"
    if dist is None:
        try:
            dist = metadata.distribution(DISTRIBUTION)
        except metadata.PackageNotFoundError:
            dist = None
    origin = _direct_url(dist) if dist is not None else None
    if dist is None or not _installed(dist, origin, running):
        origin = None
    if origin is None:  # from an index, or a copy that is not the installed distribution
        return f"pip install {shlex.quote(f'{DISTRIBUTION}[{names}]')}"
    url = str(origin.get("url", ""))
    folder = _local_path(url)
    dir_info = origin.get("dir_info")
    if isinstance(dir_info, dict) and folder is not None:
        editable = "-e " if dir_info.get("editable") else ""
        return f"pip install {editable}{shlex.quote(f'{folder}[{names}]')}"
    vcs = origin.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("vcs"):
        revision = vcs.get("requested_revision") or vcs.get("commit_id")
        url = f"{vcs['vcs']}+{url}" + (f"@{revision}" if revision else "")
    return f"pip install {shlex.quote(f'{DISTRIBUTION}[{names}] @ {url}')}"


def install_hint(extras: str | Sequence[str]) -> str:
    """The hint of an ``ExtraMissing``: the install command, and PyTorch's CPU wheel for torch."""
    names = [extras] if isinstance(extras, str) else list(extras)
    line = f"Install it: {install_command(names)}"
    if "torch" in names:
        spec = torch_requirement()
        line += (
            f" (PyTorch first, as a CPU wheel unless you need CUDA: pip install "
            f"{shlex.quote(spec)} --index-url {CPU_TORCH_INDEX}; a bare torch requirement can "
            "pull a multi-GB CUDA build)"
        )
    return line + "."


def torch_requirement(dist: metadata.Distribution | None = None) -> str:
    """The ``torch`` extra's requirement (``torch<=2.13.0,>=2.5``), from the package metadata."""
    try:
        dist = dist or metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "torch"
    for requirement in dist.requires or ():
        spec, _, marker = requirement.partition(";")
        if re.match(r"torch(?![\w.-])", spec.strip()) and "torch" in marker and "extra" in marker:
            return spec.strip().replace(" ", "")
    return "torch"


def _direct_url(dist: metadata.Distribution) -> dict[str, object] | None:
    """The PEP 610 record of how ``dist`` was installed; None for a package from an index."""
    try:
        text = dist.read_text("direct_url.json")
    except OSError:
        return None
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _local_path(url: str) -> Path | None:
    from urllib.request import url2pathname  # http.client and email come with it: only here

    parsed = urlparse(url)
    if parsed.scheme != "file":
        return None
    return Path(url2pathname(parsed.path))  # it unquotes %20 and, on Windows, drives


def _installed(
    dist: metadata.Distribution, origin: dict[str, object] | None, running: Path
) -> bool:
    """Whether the package running is the one ``dist`` installed, not another copy on sys.path."""
    dir_info = origin.get("dir_info") if origin else None
    if origin and isinstance(dir_info, dict) and dir_info.get("editable"):
        folder = _local_path(str(origin.get("url", "")))
        return folder is not None and running.is_relative_to(folder.resolve())
    installed = Path(str(dist.locate_file(f"{DISTRIBUTION}/__init__.py"))).parent
    return installed.resolve() == running


def _checkout_of(package: Path) -> Path | None:
    """The project folder of a package in a checkout (``ROOT/src/onnxgate``), if it is one."""
    root = package.parent.parent
    if package.parent.name == "src" and (root / "pyproject.toml").is_file():
        return root
    return None
