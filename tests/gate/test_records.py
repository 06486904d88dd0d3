"""The step records: the one declaration of each gate step, held to the models it names."""

from __future__ import annotations

import logging
import typing
from pathlib import Path

import pytest

from onnxgate.gate import _pipeline
from onnxgate.gate._config import GateConfig, StepsSection
from onnxgate.gate._records import BY_NAME, DETAIL, NEEDS, ORDER, RECORDS, RUNNERS
from onnxgate.gate._report import StepName
from onnxgate.settings import FeedSettings, SessionSettings, config_hash


def test_step_name_is_the_records_names() -> None:
    # StepName stays a Literal for typing: it must name exactly the recorded steps
    assert set(typing.get_args(StepName)) == set(ORDER)
    assert set(StepsSection.model_fields) == set(ORDER)


def test_tables_of_the_records_are_the_steps_tables() -> None:
    for record in RECORDS:
        assert StepsSection.model_fields[record.name].annotation is record.table, record.name
        assert RUNNERS[record.name] is record.run and DETAIL[record.name] is record.detail


def test_order_and_needs() -> None:
    # the order itself is pinned by test_gate's run; here: every step runs after its needs
    assert ORDER[0] == "export"
    for name, needs in NEEDS.items():
        assert all(ORDER.index(need) < ORDER.index(name) for need in needs), name
    assert NEEDS["tune"] == NEEDS["quantize"] == ("export", "verify")


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_every_table_key_is_a_library_field_or_declared_gate_only(record) -> None:
    table = set(record.table.model_fields) - {"enabled"}
    library = set(record.config.model_fields)
    copied = {record.renamed.get(key, key) for key in table - set(record.gate_only)}
    assert copied <= library, f"{record.name}: {copied - library} are not in {record.config}"
    assert set(record.gate_only) <= table
    assert not set(record.gate_only) & library, "a gate-only key the library has: copy it"
    assert set(record.renamed) <= table
    # what the pipeline owns is the library's, and no key of the table
    assert set(record.owned) <= library and not set(record.owned) & copied


def test_library_config_copies_the_table() -> None:
    config = GateConfig.model_validate(
        {
            "version": 1,
            "model": {"name": "m", "source": "m.onnx"},
            "steps": {
                "compare": {"localize": False, "against": "ort:disable", "tolerances": {"atol": 1}},
                "quantize": {"bench_budget": 3.0, "required": False, "op_types": ["MatMul"]},
                "check": {"ignore": ["SHP001"], "fail_on": "warning"},
            },
        }
    )
    steps = config.steps
    compare = BY_NAME["compare"].library_config(
        steps.compare, feeds=FeedSettings(seed=3), session=SessionSettings(threads=2)
    )
    assert (compare.against, compare.localize, compare.tolerances.atol) == ("ort:disable", False, 1)
    assert compare.feeds.seed == 3 and compare.session.threads == 2
    quantize = BY_NAME["quantize"].library_config(steps.quantize, out=Path("m.int8.onnx"))
    assert quantize.bench_budget_s == 3.0 and quantize.op_types == ("MatMul",)
    check = BY_NAME["check"].library_config(steps.check, runtime="installed")
    assert check.ignore == ("SHP001",) and check.fail_on == "warning"


# computed on main at d13bef3 (before the records): a step's settings hash keys its cache and
# its lineage, so a refactor of the tables must not move it
MAIN_HASHES = {
    "check": "7d5da6fe6930c295f2c8ebbd032081aeb85a248074d85719cd97b05208b44942",
    "export": "2ef1c08736e8ceb3b555020e1642981bb975d8fe7eb14a5a47fc29a10f9ce7f8",
    "compare": "26e9b30a382f818d99b5eb211deb0019c63240aa8b2e54c149b57d0f5118a5fa",
    "verify": "fae0f5f75fbff8a3b5496842c92860ec0fafa48316db5f0fd0a79fe34bb05064",
    "placement": "529bbd9c8acfada931c1e603dd4ce75376728023278dabaf321900af82b07579",
    "tune": "9957769bd597fa0eb1f354a1a31144c3e089a5ec21955b7d6e805dab7ba3bd4a",
    "quantize": "e03773e4fddd1509382a61858255228d11b8a3684bb6fd11813a1fb27766e4d5",
    "bench": "44f53434d483edf362e23dd8b9c05c5a591f5cebc9c0dc12cd02ad1abfe07f8d",
    # added after main's hashes were taken: pinned from its introduction on
    "mobile": "dc4558331cd553f1cda0d4326c1abfd090e4ae30b54312ec26b77463d32f5301",
    "web": "24d5ad143ef61283923cd25d6ccaef0bd5151c903200971cd11b1e054b6191d7",
}
MAIN_SET_HASHES = {
    "check": "300d193ae94a1c7ab423d07a01bb87a65b194e2ef08ee68e6e4d5ba0b71c5cb1",
    "compare": "054c6810b3ea82cb384a0f185cebd7d22c8023a5036effee9fdc29d3ac3a4abf",
    "verify": "5de9d273c70a8bbe136e641810c6929cae6cbc54c0ae3eb6e33abdc9799ab3cc",
    "placement": "c08610fcb9f102175298ec4d8424d663824a611d76b2d6a7c7e16979ac027937",
    "tune": "95fd965cfbb2125138e5dc166f61ec93d39a9b0804231d8c403246774b1f5778",
    "quantize": "7b1c74c7d3911b1a273ea476e72582fe3ea22a671df99bfe48e2c59d6c977e9f",
    "bench": "9db67ebe7f8c77465646f06e73f9fa0fe68926419f0fad0021672a8a68d76ad4",
}
MAIN_DIGEST = "cfeddf07b7c196eafa091dcc54cf2ba6634a086f4cc3674d55042e720ca1385c"
"""The whole config's digest (recorded in report.json, not a cache key): it moved when the
defaults gained ``[steps.mobile]``, again with ``[steps.web]``, and again when ``[model]`` gained
the TensorFlow keys (paths, custom_objects, tf_version...); each step's own hash above did not."""


def test_config_hashes_are_mains() -> None:
    config = GateConfig.model_validate(
        {
            "version": 1,
            "model": {"name": "m", "source": "m.onnx"},
            "steps": {
                "bench": {
                    "batches": [1, 4],
                    "max_p50_ms": 3.0,
                    "session": {"threads": 2},
                    "dims": {"seq": [8]},
                },
                "tune": {"enabled": True, "threads": [1, 2], "time_budget": 0},
                "quantize": {
                    "enabled": True,
                    "eval": "e.npz",
                    "bench_budget": 2.0,
                    "required": False,
                    "op_types": ["MatMul"],
                },
                "compare": {"localize": False, "against": "ort:disable"},
                "check": {"ignore": ["SHP001"]},
                "placement": {"require": "cpu", "allow_ops": ["Shape"]},
                "verify": {"runtimes": ["installed"]},
            },
        }
    )
    for name in ORDER:
        assert config_hash(getattr(StepsSection(), name)) == MAIN_HASHES[name], name
        if name in MAIN_SET_HASHES:
            assert config_hash(getattr(config.steps, name)) == MAIN_SET_HASHES[name], name
    assert config.digest() == MAIN_DIGEST


def test_a_write_the_record_does_not_declare_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "m.onnx").write_bytes(b"1")
    before = _pipeline._stamps(tmp_path)
    (tmp_path / "m.contract.json").write_text("{}")
    (tmp_path / "stray.bin").write_bytes(b"2")
    (tmp_path / "report.json").write_text("{}")  # the pipeline's own, never a step's
    after = _pipeline._stamps(tmp_path)
    declared = _pipeline._digests(tmp_path, [tmp_path / "m.contract.json", tmp_path / "m.onnx"])
    assert list(declared) == ["m.contract.json", "m.onnx"]
    with caplog.at_level(logging.WARNING, logger="onnxgate.gate._pipeline"):
        _pipeline._check_declared("tune", before, after, declared)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [f"step tune {_pipeline.UNDECLARED}: stray.bin"]
    caplog.clear()  # the warning is the point here: conftest._declared_writes must not see it


@pytest.mark.parametrize("out", ["run", "project/../run"])
def test_export_declares_the_external_data_it_copies(tmp_path: Path, out: str) -> None:
    import onnx

    from models import mlp
    from onnxgate.gate import run_gate

    onnx.save_model(
        mlp(), str(tmp_path / "net.onnx"), save_as_external_data=True, location="net.weights",
        size_threshold=0,
    )  # fmt: skip
    steps = "".join(
        f"[steps.{name}]\nenabled = false\n" for name in ORDER if name not in ("export", "verify")
    )
    config = tmp_path / "gate.toml"
    config.write_text(
        f'version = 1\n[model]\nname = "net"\nsource = "net.onnx"\n{steps}', encoding="utf-8"
    )
    (tmp_path / "project").mkdir()
    report = run_gate(config, out=tmp_path / out, cache=False)  # a run folder spelt with ..
    export = report.step("export")
    assert export is not None and export.passed, export
    # conftest._declared_writes fails this test if export wrote a file it does not declare
    assert [a.path for a in export.artefacts] == [
        "net.contract.json",
        "net.golden.npz",
        "net.onnx",
        "net.weights",
    ]
