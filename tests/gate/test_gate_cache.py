"""The gate's cache after an export that always runs (``sklearn:``, ``torch:``).

The gate cannot hash an estimator's or a module's code, so their export runs every time; what
follows keys on the files it wrote. Those differ from run to run only in the times of their
making (the contract's ``created``), which the key leaves out, and a cached step never puts an
older contract back over the fresh export's. The contract's clock is made to tick a day per
contract here, so two runs always differ in ``created`` however fast the machine is.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from models import mlp, save
from onnxgate.contract import ENV_HMAC, ContractConfig, Provenance, init_contract
from onnxgate.gate import _pipeline, _steps, run_gate

AFTER_EXPORT = {"check", "compare", "verify", "placement"}
QUIET = "[steps.bench]\nenabled = false\n"
"""Every step after the export but bench (timing) and tune and quantize (off by default)."""


@pytest.fixture
def ticking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every contract written a day after the one before.

    ``created``'s factory reads ``datetime`` from its module's globals, wherever that module is.
    """
    factory = Provenance.model_fields["created"].default_factory
    days = itertools.count()

    class Ticking(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2030, 1, 1, tzinfo=UTC) + timedelta(days=next(days))

    monkeypatch.setitem(factory.__globals__, "datetime", Ticking)


def _created(report) -> str:
    contract = Path(report.run_dir) / f"{report.name}.contract.json"
    return json.loads(contract.read_text())["provenance"]["created"]


def _sklearn_gate(folder: Path, c: float, export: str = "") -> Path:
    joblib = pytest.importorskip("joblib")
    pytest.importorskip("skl2onnx")
    from sklearn.linear_model import LogisticRegression

    x = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    joblib.dump(LogisticRegression(C=c).fit(x, (x[:, 0] > 0).astype(int)), folder / "est.joblib")
    np.save(folder / "X.npy", x)
    path = folder / "gate.toml"
    path.write_text(
        'version = 1\n[model]\nname = "est"\nsource = "sklearn:est.joblib"\n'
        f'data = "X.npy"\ntrust_pickle = true\n{export}{QUIET}'
    )
    return path


@pytest.mark.sklearn
def test_what_follows_a_sklearn_export_is_cached_until_the_estimator_or_contract_changes(
    tmp_path: Path, ticking: None
) -> None:
    path = _sklearn_gate(tmp_path, c=1.0)
    first = run_gate(path)
    assert first.passed, [(s.name, s.status, s.reason) for s in first.steps]
    assert not any(s.cached for s in first.steps)

    again = run_gate(path)
    assert again.passed
    assert not again.step("export").cached  # the estimator is code: its export always runs
    assert {s.name for s in again.steps if s.cached} == AFTER_EXPORT
    # the fresh export's contract stays, with its own time and the bytes the export wrote
    assert _created(again) > _created(first)
    exported = {a.path: a.sha256 for a in again.step("export").artefacts}
    assert {a.path: a.sha256 for a in again.artefacts} == exported

    # other rules in the contract, the same model and golden samples: the contract is read
    looser = _sklearn_gate(tmp_path, c=1.0, export="[steps.export.tolerances]\natol = 0.01\n")
    ruled = run_gate(looser)
    assert ruled.passed
    assert not any(s.cached for s in ruled.steps)
    files = {a.path: a.sha256 for a in ruled.artefacts}
    assert {p: files[p] for p in ("est.onnx", "est.golden.npz")} == {
        p: exported[p] for p in ("est.onnx", "est.golden.npz")
    }

    _sklearn_gate(tmp_path, c=0.01)  # another estimator: other weights, other golden outputs
    changed = run_gate(path)
    assert changed.passed
    assert not any(s.cached for s in changed.steps)


def test_a_cached_step_never_puts_an_older_contract_back_over_the_fresh_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ticking: None
) -> None:
    # stand-ins with a real contract: an export that always runs (or writes again the bytes
    # it wrote last) and a tune that records into the export's contract
    exports: list[dict[str, bytes]] = []
    tunes: list[str] = []

    def export(ctx: _steps.Context, step) -> _steps.Outcome:
        save(mlp(), ctx.model)
        if replay:
            for name, data in exports[-1].items():
                (ctx.run_dir / name).write_bytes(data)
        else:
            init_contract(ctx.model, ContractConfig(force=True))
        exports.append({p.name: p.read_bytes() for p in ctx.run_dir.iterdir()})
        return _steps.Outcome(True, "exported")

    def tune(ctx: _steps.Context, step) -> _steps.Outcome:
        contract = ctx.run_dir / f"{ctx.name}.contract.json"
        document = json.loads(contract.read_text())
        document["performance"]["tuned"] = []  # stands for a record, read by nothing here
        contract.write_text(json.dumps(document, indent=1))
        tunes.append(document["provenance"]["created"])
        return _steps.Outcome(True, "tuned")

    monkeypatch.setitem(_pipeline.RUNNERS, "export", export)
    monkeypatch.setitem(_pipeline.RUNNERS, "tune", tune)
    (tmp_path / "est.joblib").write_bytes(b"the stand-in export does not read it")
    (tmp_path / "X.npy").write_bytes(b"")
    path = tmp_path / "gate.toml"
    path.write_text(
        'version = 1\n[model]\nname = "est"\nsource = "sklearn:est.joblib"\ndata = "X.npy"\n'
        "[steps.tune]\nenabled = true\n[steps.placement]\nenabled = false\n" + QUIET
    )
    replay = False
    first = run_gate(path)
    assert first.step("tune").passed and len(tunes) == 1
    again = run_gate(path)
    # check, compare, verify read the contract without its time: cached; tune would put the
    # first run's contract back over the fresh export's, so it runs again on the new one
    assert {s.name for s in again.steps if s.cached} == {"check", "compare", "verify"}
    assert not again.step("tune").cached and len(tunes) == 2
    assert tunes[1] == _created(again) > _created(first)
    # over the very contract it was last cached over, tune is taken from the cache
    replay = True
    third = run_gate(path)
    assert third.step("tune").cached and len(tunes) == 2
    contract = f"{first.name}.contract.json"
    assert (Path(third.run_dir) / contract).read_bytes() == (
        Path(again.run_dir) / contract
    ).read_bytes()


def test_a_contract_is_keyed_without_its_time_and_signature_but_with_its_signer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ticking: None
) -> None:
    model = save(mlp(), tmp_path / "m.onnx")

    def written(key: str | None) -> tuple[bytes, str]:
        """The contract's bytes and its digest for cache keys, written with ``key``."""
        if key is None:
            monkeypatch.delenv(ENV_HMAC, raising=False)
        else:
            monkeypatch.setenv(ENV_HMAC, key)
        init_contract(model, ContractConfig(force=True))
        contract = tmp_path / "m.contract.json"
        return contract.read_bytes(), _pipeline._snapshot(tmp_path, content=True)[contract.name]

    unsigned, again = written(None), written(None)
    assert unsigned[0] != again[0] and unsigned[1] == again[1]  # a day apart, the same content
    signed, resigned = written("a" * 32), written("a" * 32)
    assert signed[0] != resigned[0] and signed[1] == resigned[1]
    assert signed[1] != unsigned[1]  # a signed contract is not an unsigned one
    assert written("b" * 32)[1] != signed[1]  # nor one signed by another key


def test_a_signing_key_set_since_the_last_run_makes_the_export_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ONNX source's export is cached on its file; the key it signs with is part of it."""
    save(mlp(), tmp_path / "m.onnx")
    path = tmp_path / "gate.toml"
    path.write_text(f'version = 1\n[model]\nname = "m"\nsource = "m.onnx"\n{QUIET}')
    monkeypatch.delenv(ENV_HMAC, raising=False)
    assert run_gate(path).passed

    monkeypatch.setenv(ENV_HMAC, "a secret of thirty-two characters")
    signed = run_gate(path)
    assert signed.passed
    assert not signed.step("export").cached
    contract = json.loads((Path(signed.run_dir) / "m.contract.json").read_text())
    assert contract["signing"]["key_id"], contract.get("signing")

    assert run_gate(path).step("export").cached  # the same key again: the cache holds


def test_a_same_size_rewrite_within_one_clock_tick_is_hashed_again(tmp_path: Path) -> None:
    """An atomic write replaces the file: same size, same mtime (a coarse clock), new inode."""
    import os

    from onnxgate._fs import atomic_write_text

    path = tmp_path / "m.contract.json"
    atomic_write_text(path, '{"a": 1}')
    first = (_pipeline._snapshot(tmp_path, content=True), _pipeline._snapshot(tmp_path))
    stamp = path.stat().st_mtime_ns
    atomic_write_text(path, '{"a": 2}')
    os.utime(path, ns=(stamp, stamp))
    assert _pipeline._snapshot(tmp_path, content=True) != first[0]
    assert _pipeline._snapshot(tmp_path) != first[1]
