"""A missing extra's install line fits how onnxgate was installed; every raise site gives it."""

from __future__ import annotations

import ast
import json
from importlib import metadata
from pathlib import Path

import pytest

from onnxgate._install import install_command, install_hint, torch_requirement
from onnxgate.errors import ExitCode, ExtraMissing

SRC = Path(__file__).resolve().parents[1] / "src" / "onnxgate"

METADATA = """Metadata-Version: 2.4
Name: onnxgate
Version: 0.1.0
Requires-Dist: typer<0.30,>=0.29
Provides-Extra: torch
Requires-Dist: torch<=2.13.0,>=2.5; extra == "torch"
Provides-Extra: serve
Requires-Dist: uvicorn[standard]>=0.29; extra == "serve"
"""


def _installed(site: Path, direct_url: dict | None) -> tuple[metadata.Distribution, Path]:
    """A distribution as pip leaves it in ``site``: dist-info, PEP 610 record, the package."""
    info = site / "onnxgate-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(METADATA)
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    package = site / "onnxgate"
    package.mkdir()
    (package / "__init__.py").write_text("")
    return metadata.PathDistribution(info), package


def test_a_package_from_an_index_is_named_by_its_name(tmp_path: Path) -> None:
    dist, package = _installed(tmp_path / "site-packages", None)
    assert install_command("serve", dist=dist, running=package) == "pip install 'onnxgate[serve]'"


def test_a_local_folder_installed_without_e_is_named_by_its_path(tmp_path: Path) -> None:
    checkout = tmp_path / "my checkout"  # a space: the line must still paste into a shell
    url = {"url": checkout.as_uri(), "dir_info": {}}
    dist, package = _installed(tmp_path / "site-packages", url)
    line = install_command("serve", dist=dist, running=package)
    assert line == f"pip install '{checkout}[serve]'"


def test_an_editable_checkout_is_named_with_e(tmp_path: Path) -> None:
    checkout = tmp_path / "onnxgate-checkout"
    running = checkout / "onnxgate"  # a flat layout: only the PEP 610 record says "editable"
    running.mkdir(parents=True)
    url = {"url": checkout.as_uri(), "dir_info": {"editable": True}}
    dist, _ = _installed(tmp_path / "site-packages", url)
    assert (
        install_command(["torch", "examples"], dist=dist, running=running)
        == f"pip install -e '{checkout}[torch,examples]'"
    )


def test_a_src_checkout_is_named_with_e_whatever_distribution_is_installed(tmp_path: Path) -> None:
    # PYTHONPATH=src ahead of another install: the code that runs is the checkout's
    checkout = tmp_path / "work"
    running = checkout / "src" / "onnxgate"
    running.mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\nname = 'onnxgate'\n")
    dist, _ = _installed(tmp_path / "site-packages", None)
    assert install_command("deploy", dist=dist, running=running) == (
        f"pip install -e '{checkout}[deploy]'"
    )


def test_another_copy_than_the_installed_one_gets_the_index_form(tmp_path: Path) -> None:
    url = {"url": (tmp_path / "checkout").as_uri(), "dir_info": {}}
    dist, _ = _installed(tmp_path / "site-packages", url)
    elsewhere = tmp_path / "zipapp" / "onnxgate"
    elsewhere.mkdir(parents=True)
    assert install_command("serve", dist=dist, running=elsewhere) == (
        "pip install 'onnxgate[serve]'"
    )


def test_vcs_and_archive_installs_are_named_by_their_url(tmp_path: Path) -> None:
    git = {
        "url": "https://example.org/onnxgate.git",
        "vcs_info": {"vcs": "git", "commit_id": "abc123"},
    }
    dist, package = _installed(tmp_path / "a", git)
    assert install_command("serve", dist=dist, running=package) == (
        "pip install 'onnxgate[serve] @ git+https://example.org/onnxgate.git@abc123'"
    )
    wheel = {"url": "https://example.org/onnxgate-0.1.0-py3-none-any.whl", "archive_info": {}}
    dist, package = _installed(tmp_path / "b", wheel)
    assert install_command("sign", dist=dist, running=package) == (
        "pip install 'onnxgate[sign] @ https://example.org/onnxgate-0.1.0-py3-none-any.whl'"
    )


def test_torch_gets_the_cpu_wheel_note_with_the_extras_own_range(tmp_path: Path) -> None:
    dist, _ = _installed(tmp_path / "site-packages", None)
    assert torch_requirement(dist) == "torch<=2.13.0,>=2.5"
    hint = install_hint("torch")
    assert "--index-url https://download.pytorch.org/whl/cpu" in hint
    assert "CUDA" in hint and "[torch]" in hint
    assert "download.pytorch.org" not in install_hint("serve")


def test_extra_missing_leads_its_hint_with_the_install_line() -> None:
    error = ExtraMissing("`onnxgate serve` needs the 'serve' extra.", extra="serve", hint="Or not.")
    assert error.exit_code == ExitCode.ENVIRONMENT
    assert error.hint == f"{install_hint('serve')} Or not."
    assert error.to_dict()["extras"] == ["serve"]
    assert ExtraMissing("no extra for this", extra=None).hint is None


def test_every_raise_site_says_which_extra() -> None:
    """``extra=`` at every ``ExtraMissing(...)``: None only where no extra provides the module."""
    unnamed = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "ExtraMissing"
                and not any(keyword.arg == "extra" for keyword in node.keywords)
            ):
                unnamed.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not unnamed, f"ExtraMissing without extra=: {unnamed}"


@pytest.mark.parametrize(
    ("module", "extra"),
    [("onnxgate.serve._metrics", "serve"), ("onnxgate.deploy._proto", "deploy")],
)
def test_a_module_of_an_extra_names_it_when_its_package_is_missing(
    module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import sys

    blocked = {"serve": "prometheus_client", "deploy": "tritonclient"}[extra]
    # import of it raises ImportError, also of submodules an earlier test already imported
    for name in [m for m in sys.modules if m == blocked or m.startswith(blocked + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, blocked, None)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ExtraMissing) as caught:
        importlib.import_module(module)
    assert caught.value.extras == [extra]
    assert f"'{extra}' extra" in caught.value.message
    assert f"[{extra}]'" in (caught.value.hint or "")
