"""The registry's Python API on SQLite and PostgreSQL: register, read, promote, fetch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from onnxgate.errors import ArtefactCorrupt, ConfigError, NotFound, PromotionRefused
from onnxgate.registry import ModelVersion, open_registry, parse_ref

from ._registry_helpers import FINGERPRINT, gate_report, make_files, sha


def test_register_returns_the_version_with_digests_and_alias(registry, tmp_path):
    files = make_files(tmp_path / "run")
    version = registry.register(
        "bert",
        files,
        gate_report(files),
        alias="champion",
        description="a classifier",
        tags={"team": "search"},
        source={"kind": "torch", "git": "abc123"},
        created_by="ci",
    )
    assert isinstance(version, ModelVersion)
    assert (version.name, version.number, version.status, version.passed) == (
        "bert",
        1,
        "ready",
        True,
    )
    assert version.aliases == ("champion",)
    assert version.created_by == "ci"
    assert version.artefacts == {role: sha(p) for role, p in files.items()}
    assert json.loads(version.model_dump_json())["number"] == 1
    with pytest.raises(ValidationError, match="frozen"):
        version.number = 2  # type: ignore[misc]

    detail = registry.show("bert@champion")
    assert detail.version == version.model_copy(update={"created_at": detail.version.created_at})
    assert detail.description == "a classifier"
    assert detail.tags == {"team": "search"}
    assert detail.source == {"kind": "torch", "git": "abc123"}
    assert {a.role: a.filename for a in detail.artefacts} == {
        "model": "m.onnx",
        "contract": "m.contract.json",
        "golden": "m.golden.npz",
    }
    (run,) = detail.gate_runs
    assert run.passed and run.fingerprint == FINGERPRINT
    assert [(s.name, s.status) for s in run.steps] == [
        ("check", "passed"),
        ("verify", "passed"),
        ("bench", "passed"),
    ]
    assert run.steps[2].figures["p50_ms"] == 1.25
    (perf,) = detail.performance
    assert (perf.fingerprint, perf.step, perf.figures["p50_ms"]) == (FINGERPRINT, "bench", 1.25)
    (promotion,) = detail.promotions
    assert promotion.alias == "champion" and not promotion.forced
    report = registry.gate_report("bert@1")
    assert report["environment"]["fingerprint"] == FINGERPRINT
    assert report["steps"][2]["figures"]["p99_ms"] == 2.5


def test_versions_count_up_and_references_resolve(registry, tmp_path):
    for i in range(3):
        files = make_files(tmp_path / f"run{i}")
        registry.register("bert", files, gate_report(files), alias="champion" if i == 1 else None)
    assert [v.number for v in registry.versions("bert")] == [1, 2, 3]
    assert registry.get("bert").number == 3
    assert registry.get("bert@latest").number == 3
    assert registry.get("bert@2").aliases == ("champion",)
    assert registry.get("bert@champion").number == 2
    (summary,) = registry.models()
    assert (summary.name, summary.versions, summary.latest) == ("bert", 3, 3)
    assert summary.aliases == {"champion": 2}


def test_a_second_model_has_its_own_numbers(registry, tmp_path):
    files = make_files(tmp_path / "run")
    registry.register("a", files, gate_report(files))
    registry.register("a", files, gate_report(files))
    assert registry.register("b", files, gate_report(files)).number == 1
    assert [m.name for m in registry.models()] == ["a", "b"]


def test_identical_files_are_stored_once(registry, tmp_path):
    files = make_files(tmp_path / "run", seed=b"same")
    for _ in range(3):
        registry.register("bert", files, gate_report(files))
    blobs = list(registry.store.iter_blobs())
    assert len(blobs) == 3  # model, contract, golden: once each for three versions
    for _, path in blobs:
        assert path.stat().st_mode & 0o222 == 0  # read-only


def test_missing_references_name_what_exists(registry, tmp_path):
    files = make_files(tmp_path / "run")
    registry.register("bert", files, gate_report(files), alias="champion")
    with pytest.raises(NotFound, match="no registered model named 'gpt'") as err:
        registry.show("gpt")
    assert "bert" in (err.value.hint or "")
    with pytest.raises(NotFound, match="no version 7") as err:
        registry.get("bert@7")
    assert "1 to 1" in (err.value.hint or "")
    with pytest.raises(NotFound, match="no alias 'prod'") as err:
        registry.get("bert@prod")
    assert "champion" in (err.value.hint or "")
    with pytest.raises(ConfigError, match="not a valid model name"):
        registry.get("bad name")
    with pytest.raises(ConfigError, match="not a version reference"):
        registry.get("bert@-x")


def test_parse_ref():
    assert parse_ref("bert") == ("bert", None)
    assert parse_ref("bert@latest") == ("bert", None)
    assert parse_ref("bert@12") == ("bert", 12)
    assert parse_ref("bert@prod") == ("bert", "prod")


def test_promote_refuses_a_failed_version_and_records_a_forced_one(registry, tmp_path):
    good = make_files(tmp_path / "good")
    bad = make_files(tmp_path / "bad")
    registry.register("bert", good, gate_report(good), alias="champion")
    failed = registry.register("bert", bad, gate_report(bad, passed=False))
    assert (failed.number, failed.status, failed.passed) == (2, "failed", False)

    with pytest.raises(PromotionRefused, match="bert@2 did not pass") as err:
        registry.promote("bert@2", "champion")
    assert "--force --reason" in (err.value.hint or "")
    assert registry.get("bert@champion").number == 1  # unchanged
    with pytest.raises(ConfigError, match="--reason"):
        registry.promote("bert@2", "champion", force=True)

    moved = registry.promote(
        "bert@2", "champion", force=True, reason="latency gate flaky", by="alice"
    )
    assert moved.number == 2 and moved.aliases == ("champion",)
    assert registry.get("bert@1").aliases == ()
    (promotion,) = registry.show("bert@2").promotions
    assert promotion.forced and promotion.reason == "latency gate flaky"
    assert (promotion.by, promotion.previous, promotion.version) == ("alice", 1, 2)

    # a passing version moves by name or by another alias, unforced
    back = registry.promote("bert@1", "champion")
    assert back.number == 1
    assert registry.promote("bert@champion", "prod").number == 1
    assert registry.get("bert@1").aliases == ("champion", "prod")


def test_register_with_an_alias_refuses_a_failed_gate_and_writes_nothing(registry, tmp_path):
    files = make_files(tmp_path / "run")
    with pytest.raises(PromotionRefused, match="the gate did not pass.*bench"):
        registry.register("bert", files, gate_report(files, passed=False), alias="champion")
    assert registry.models() == []
    assert list(registry.store.iter_blobs()) == []


def test_register_refuses_files_the_gate_did_not_judge(registry, tmp_path):
    files = make_files(tmp_path / "run")
    report = gate_report(files)
    files["model"].write_bytes(b"changed after the gate")
    with pytest.raises(ArtefactCorrupt, match="not the file the gate judged"):
        registry.register("bert", files, report)
    with pytest.raises(ConfigError, match="is not a file"):
        registry.register("bert", {"model": tmp_path / "nope.onnx"}, gate_report())
    with pytest.raises(ConfigError, match="no artefacts"):
        registry.register("bert", {}, gate_report())
    with pytest.raises(ConfigError, match="not a valid alias"):
        registry.register("bert", files, gate_report(), alias="latest")
    with pytest.raises(ConfigError, match="'passed'"):
        registry.register("bert", files, {"steps": []})
    assert registry.models() == []


def test_register_takes_the_report_as_json_data(registry, tmp_path):
    files = make_files(tmp_path / "run")
    document = gate_report(files).model_dump(mode="json")
    version = registry.register("bert", files, document)
    assert version.number == 1
    assert registry.gate_report("bert")["name"] == "m"
    assert registry.show("bert").source == {"source": "model.onnx"}


def test_a_later_gate_run_adds_performance_of_another_machine(registry, tmp_path):
    files = make_files(tmp_path / "run")
    registry.register("bert", files, gate_report(files))
    run = registry.record_gate_run("bert@1", gate_report(files, fingerprint="feedface", p50_ms=3.0))
    assert run.fingerprint == "feedface"
    detail = registry.show("bert@1")
    assert [(p.fingerprint, p.figures["p50_ms"]) for p in detail.performance] == [
        (FINGERPRINT, 1.25),
        ("feedface", 3.0),
    ]
    other = make_files(tmp_path / "other")
    with pytest.raises(ArtefactCorrupt, match="judged another model"):
        registry.record_gate_run("bert@1", gate_report(other))


def test_fetch_names_files_for_verify_and_checks_them(registry, tmp_path):
    files = make_files(tmp_path / "run", name="exported")
    files["model.int8"] = tmp_path / "run" / "exported.int8.onnx"
    files["model.int8"].write_bytes(b"int8 model")
    files["exported.onnx.data"] = tmp_path / "run" / "exported.onnx.data"
    files["exported.onnx.data"].write_bytes(b"weights")
    registry.register("bert", files, gate_report(files), alias="champion")

    result = registry.fetch("bert@champion", tmp_path / "out")
    written = {f.role: f for f in result.files}
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    # the contract names its golden file "exported.golden.npz": it is written under that name too
    assert names == [
        "bert.contract.json",
        "bert.golden.npz",
        "bert.int8.onnx",
        "bert.onnx",
        "exported.golden.npz",
        "exported.onnx.data",
    ]
    assert result.model_path == str(tmp_path / "out" / "bert.onnx")
    for role, path in files.items():
        assert written[role].sha256 == sha(path)
        assert sha(tmp_path / "out" / written[role].path.split("/")[-1]) == sha(path)
    assert (tmp_path / "out" / "exported.golden.npz").read_bytes() == files["golden"].read_bytes()
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.endswith(".tmp")]


def test_fetch_refuses_a_damaged_blob(registry, tmp_path):
    files = make_files(tmp_path / "run")
    version = registry.register("bert", files, gate_report(files))
    blob = registry.store.path(version.artefacts["model"])
    blob.chmod(0o644)
    blob.write_bytes(b"rot" + blob.read_bytes()[3:])
    with pytest.raises(ArtefactCorrupt, match="is damaged") as err:
        registry.fetch("bert", tmp_path / "out")
    assert "fsck" in (err.value.hint or "")
    assert not (tmp_path / "out" / "bert.onnx").exists()
    blob.unlink()
    with pytest.raises(ArtefactCorrupt, match="is missing"):
        registry.fetch("bert", tmp_path / "out")


def test_reopening_keeps_everything(backend, tmp_path):
    files = make_files(tmp_path / "run")
    with backend.open() as reg:
        reg.register("bert", files, gate_report(files), alias="champion")
    with backend.open() as reg:
        assert reg.get("bert@champion").number == 1
        assert reg.register("bert", files, gate_report(files)).number == 2


def test_the_registry_does_not_import_runtimes():
    """No onnxruntime or torch at import (onnx comes with the onnxgate package itself), and no
    import of onnx, onnxruntime or torch anywhere in the registry's own modules, but one: MLflow's
    ONNX flavour logs a parsed ``ModelProto``, so publishing parses the model, inside the function
    that logs it (``_mlflow._log``), never at import."""
    import ast
    import subprocess
    from pathlib import Path

    import onnxgate.registry

    code = (
        "import sys, onnxgate.registry, onnxgate.cli.registry_cmd;"
        "bad = [m for m in ('onnxruntime', 'torch') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    heavy = {"onnx", "onnxruntime", "torch"}
    package = Path(onnxgate.registry.__file__).parent
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text())
        if path.name == "_mlflow.py":  # only _log's own body may import onnx
            log = next(f for f in tree.body if getattr(f, "name", "") == "_log")
            tree.body.remove(log)
            log_imports = {
                a.name for n in ast.walk(log) if isinstance(n, ast.Import) for a in n.names
            }
            assert log_imports & heavy <= {"onnx"}, log_imports
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not {n.split(".")[0] for n in names} & heavy, f"{path}: {names}"


def test_open_registry_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("ONNXGATE_REGISTRY", raising=False)
    monkeypatch.delenv("ONNXGATE_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with open_registry() as reg:
        assert reg.url_masked == f"sqlite:///{tmp_path}/data/onnxgate/registry.db"
        assert reg.store.root == tmp_path / "data" / "onnxgate" / "registry-store"
    monkeypatch.setenv("ONNXGATE_REGISTRY", str(tmp_path / "env.db"))
    monkeypatch.setenv("ONNXGATE_STORE", str(tmp_path / "envstore"))
    with open_registry() as reg:
        assert reg.url_masked == f"sqlite:///{tmp_path}/env.db"
        assert reg.store.root == tmp_path / "envstore"
    with open_registry(f"sqlite:///{tmp_path}/x/arg.db", tmp_path / "argstore") as reg:
        assert (tmp_path / "x" / "arg.db").is_file()
        assert reg.store.root == tmp_path / "argstore"


def test_bad_urls_are_usage_or_environment_errors(tmp_path):
    from onnxgate.errors import ExitCode, ExtraMissing, RegistryUnreachable

    with pytest.raises(ConfigError, match="in-memory"):
        open_registry("sqlite://", tmp_path)
    with pytest.raises(ConfigError, match="dialect"):
        open_registry("nosuchdb://x/y", tmp_path)
    with pytest.raises(ExtraMissing, match="driver 'pg8000'") as missing:
        open_registry("postgresql+pg8000://u:secret@127.0.0.1/x", tmp_path)
    assert "secret" not in str(missing.value)
    with pytest.raises(RegistryUnreachable) as err:
        open_registry("postgresql+psycopg://u:secret@127.0.0.1:1/x", tmp_path)
    assert "postgresql+psycopg://u:***@127.0.0.1:1/x" in err.value.message
    assert "secret" not in str(err.value)
    assert err.value.exit_code == ExitCode.ENVIRONMENT
    not_a_db = tmp_path / "garbage.db"
    not_a_db.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(RegistryUnreachable, match="garbage.db"):
        open_registry(str(not_a_db), tmp_path)


def test_timings_other_load_spoiled_are_not_recorded_as_the_versions_speed(registry, tmp_path):
    files = make_files(tmp_path / "run")
    registry.register("bert", files, gate_report(files))
    spoiled = gate_report(files, fingerprint="feedface", p50_ms=9.0)
    steps = [
        s.model_copy(update={"figures": {**s.figures, "reliable": False, "unreliable": "busy"}})
        if s.name == "bench"
        else s
        for s in spoiled.steps
    ]
    registry.record_gate_run("bert@1", spoiled.model_copy(update={"steps": steps}))
    detail = registry.show("bert@1")
    # the run and its step are kept; only the quiet machine's figures are the version's speed
    assert len(detail.gate_runs) == 2
    assert [(p.fingerprint, p.figures["p50_ms"]) for p in detail.performance] == [
        (FINGERPRINT, 1.25)
    ]


def test_fetch_keeps_a_step_folder_s_files_in_that_folder_and_never_outside(registry, tmp_path):
    files = make_files(tmp_path / "run")
    # [steps.web] and [steps.mobile] register their folders' files by their path in the run folder
    for role, body in {
        "web/m.onnx": b"web model",
        "web/m.required_operators.config": b"web ops",
        "mobile/m.required_operators.config": b"mobile ops",
        "../escape.bin": b"outside",
        "/abs/escape.bin": b"absolute",
    }.items():
        path = tmp_path / "run" / role.replace("/", "_")
        path.write_bytes(body)
        files[role] = path
    registry.register("m", files, gate_report(files))

    out = tmp_path / "out"
    registry.fetch("m@1", out)
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert "web/m.onnx" in written and (out / "web" / "m.onnx").read_bytes() == b"web model"
    assert (out / "web" / "m.required_operators.config").read_bytes() == b"web ops"
    assert (out / "mobile" / "m.required_operators.config").read_bytes() == b"mobile ops"
    assert (out / "m.onnx").read_bytes() == files["model"].read_bytes()  # the gated model
    assert not (tmp_path / "escape.bin").exists()
    assert not Path("/abs/escape.bin").exists()
    assert len(written) == len(files)
