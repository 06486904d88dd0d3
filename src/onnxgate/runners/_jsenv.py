"""ONNX Runtime's JavaScript packages in onnxgate's cache: Node.js, npm and Chromium found or refused.

``onnxruntime-web`` runs in a headless Chromium that ``playwright-core`` drives; ``onnxruntime-node``
runs in Node.js itself. Each release is installed once per machine with npm into a folder of its
own beside the isolated Python environments (``$ONNXGATE_ENV_DIR`` or the cache's ``envs``),
built under a temporary name and renamed into place when complete, like those. Nothing is
downloaded from outside the npm registry: ``onnxruntime-node``'s install script (which fetches CUDA
parts) and Playwright's browser download are both turned off, and the browser is the machine's own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from onnxgate._fs import cache_dir
from onnxgate.errors import RuntimeEnvError

WEB = "onnxruntime-web"
NODE = "onnxruntime-node"
JS_PACKAGES = (WEB, NODE)
PLAYWRIGHT_CORE = "1.65.1"
"""The ``playwright-core`` release that drives Chromium for ``onnxruntime-web`` (no browser of its
own: ``PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD``)."""
MIN_NODE = 18
"""The oldest Node.js major release the drivers run on."""

_CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_READY = ".onnxgate-ready"


def node_binary() -> Path:
    """Node.js, from ``$ONNXGATE_NODE`` or the ``PATH``.

    Raises:
        RuntimeEnvError: no Node.js, or one older than ``MIN_NODE`` (exit 3, with the install
            line).
    """
    install = (
        f"Install Node.js {MIN_NODE} or newer with npm ('apt-get install nodejs npm' on Debian, "
        "or https://nodejs.org), or point ONNXGATE_NODE at its node binary."
    )
    override = os.environ.get("ONNXGATE_NODE")
    if override and not Path(override).is_file():
        raise RuntimeEnvError(f"ONNXGATE_NODE names {override}, which is not a file.", hint=install)
    found = override or shutil.which("node")
    if not found:
        raise RuntimeEnvError(
            "Node.js is not installed: onnxruntime-web and onnxruntime-node run through it.",
            hint=install,
        )
    try:
        done = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30)
        major = int(done.stdout.strip().lstrip("v").split(".")[0])
    except (OSError, subprocess.TimeoutExpired, ValueError) as err:
        raise RuntimeEnvError(
            f"Node.js at {found} does not run ({err}).",
            hint="Reinstall Node.js, or point ONNXGATE_NODE at a working node binary.",
        ) from err
    if major < MIN_NODE:
        raise RuntimeEnvError(
            f"Node.js at {found} is release {major}; onnxgate's drivers need {MIN_NODE} or newer.",
            hint="Install a newer Node.js, or point ONNXGATE_NODE at one.",
        )
    return Path(found)


def npm_binary() -> Path:
    """npm, beside Node.js or on the ``PATH``.

    Raises:
        RuntimeEnvError: npm is not installed (exit 3, with the install line).
    """
    beside = node_binary().with_name("npm")
    found = str(beside) if beside.exists() else shutil.which("npm")
    if not found:
        raise RuntimeEnvError(
            "npm is not installed: onnxgate installs ONNX Runtime's JavaScript packages with it.",
            hint="Install npm ('apt-get install npm' on Debian; it comes with Node.js from "
            "https://nodejs.org).",
        )
    return Path(found)


def chromium_binary() -> Path:
    """The machine's Chromium, from ``$ONNXGATE_CHROMIUM`` or the ``PATH``.

    Raises:
        RuntimeEnvError: no Chromium (exit 3, with the install line).
    """
    override = os.environ.get("ONNXGATE_CHROMIUM")
    if override:
        if not Path(override).is_file():
            raise RuntimeEnvError(
                f"ONNXGATE_CHROMIUM names {override}, which is not a file.",
                hint="Point it at a Chromium or Chrome binary, or unset it and install one "
                "('apt-get install chromium' on Debian).",
            )
        return Path(override)
    for name in _CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    raise RuntimeEnvError(
        "Chromium is not installed: onnxruntime-web runs in a headless Chromium.",
        hint="Install it ('apt-get install chromium' on Debian), or point ONNXGATE_CHROMIUM at a "
        "Chromium or Chrome binary.",
    )


def js_env_path(package: str, version: str) -> Path:
    """The folder of one release's npm install (``node_modules`` inside)."""
    root = os.environ.get("ONNXGATE_ENV_DIR")
    base = Path(root) if root else cache_dir() / "envs"
    return base / f"{package}-{version}-npm"


def requirements(package: str, version: str) -> list[str]:
    """What npm installs for a release: the package, and for the web, the browser's driver."""
    wanted = [f"{package}@{version}"]
    if package == WEB:
        wanted.append(f"playwright-core@{PLAYWRIGHT_CORE}")
    return wanted


def ensure_js_env(
    package: str,
    version: str,
    *,
    refresh: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Install (once) a release of ``onnxruntime-web`` or ``onnxruntime-node`` with npm.

    Returns:
        The folder holding ``node_modules``.

    Raises:
        RuntimeEnvError: Node.js or npm is missing, or npm failed (unknown release, registry
            unreachable).
    """
    env = js_env_path(package, version)
    if (env / _READY).exists() and not refresh:
        return env
    npm = npm_binary()
    wanted = requirements(package, version)
    try:
        env.parent.mkdir(parents=True, exist_ok=True)
        build = Path(tempfile.mkdtemp(prefix=f".{env.name}-", dir=env.parent))
    except OSError as err:
        raise RuntimeEnvError(
            f"cannot create a folder for {package}=={version} under {env.parent} "
            f"({err.strerror or err}).",
            hint="Point ONNXGATE_ENV_DIR or ONNXGATE_CACHE_DIR at a writable folder.",
        ) from err
    try:
        (build / "package.json").write_text('{"private": true}\n')
        if progress:
            progress(f"installing {' '.join(wanted)} with npm")
        environment = os.environ | {
            "ONNXRUNTIME_NODE_INSTALL": "skip",
            "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1",
            "npm_config_update_notifier": "false",
        }
        command = [str(npm), "install", "--no-audit", "--no-fund", "--ignore-scripts", *wanted]
        try:
            done = subprocess.run(
                command, cwd=build, env=environment, capture_output=True, text=True, timeout=1800
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise RuntimeEnvError(f"npm install {' '.join(wanted)} failed: {err}.") from err
        if done.returncode != 0:
            lines = [ln for ln in (done.stderr + done.stdout).splitlines() if "ERR" in ln]
            raise RuntimeEnvError(
                f"npm install {' '.join(wanted)} failed: {' | '.join(lines[-3:]) or done.returncode}",
                hint=f"Check that {package}@{version} exists ('npm view {package} versions') and "
                "that the npm registry is reachable; a release installed once works offline.",
            )
        (build / _READY).write_text(" ".join(wanted) + "\n")
        if (env / _READY).exists() and not refresh:
            return env  # another process finished first
        if env.exists():
            shutil.rmtree(env, ignore_errors=True)
        os.replace(build, env)
    finally:
        if build.exists():
            shutil.rmtree(build, ignore_errors=True)
    return env
