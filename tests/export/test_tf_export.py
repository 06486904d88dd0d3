"""``export tf`` / ``export keras``: every conversion path proved against TensorFlow, the best kept.

The models are built once per session by tests/tf_models.py inside TensorFlow's isolated
environment (the ``tf_models`` fixture); TensorFlow itself runs there, ONNX Runtime here. Each
export is one TensorFlow process (its import takes seconds), so each test exports once.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import TF_LAYERS
from onnxgate.cli import app
from onnxgate.contract import contract_paths, load_contract
from onnxgate.errors import ConfigError, ExportError
from onnxgate.export import TfExportConfig, export_tf
from onnxgate.model import Signature, load_model

runner = CliRunner()


def _dims(path, name: str) -> list:
    inputs = {s.name: s for s in Signature.from_graph(load_model(path).proto.graph).inputs}
    return list(inputs[name].shape or [])


def _sizes(report, label: str) -> set[int]:
    """The sizes the parity samples (labelled ``batch=7,seq=1``) gave a dynamic axis."""
    return {
        int(size)
        for s in report.parity.samples
        for name, size in (part.split("=") for part in s.label.split(","))
        if name == label
    }


def test_an_lstm_is_proved_at_every_sequence_length_by_every_path_and_the_best_kept(
    tf_models, tmp_path
) -> None:
    out = tmp_path / "lstm.onnx"
    report = export_tf(tf_models / "lstm.keras", TfExportConfig(out=out, dynamic=["series:1=seq"]))
    assert report.passed and out.exists()
    # the batch at 1, 7 and 32, the sequence at 1, between and past what anything traced
    labels = [s.label for s in report.parity.samples]
    assert {"batch=1,seq=1", "batch=7,seq=1", "batch=32,seq=1", "batch=1,seq=19"} <= set(labels)
    assert _dims(out, "series") == ["batch", "seq", 4]
    paths = {c.path: c for c in report.candidates}
    assert set(paths) == {"tf2onnx-keras", "tf2onnx-saved-model", "keras-onnx"}
    assert all(c.passed and c.max_abs is not None and c.max_abs < 1e-5 for c in paths.values())
    (chosen,) = [c for c in report.candidates if c.chosen]
    assert report.exporter == chosen.exporter
    assert report.notices[0].startswith(f"chose {chosen.path} (max_abs ")
    assert all(p in report.notices[0] for p in paths if p != chosen.path)
    contract = load_contract(out)
    assert contract.provenance is not None
    assert contract.provenance.framework == "tensorflow 2.21.0, keras 3.15.1"
    assert contract.provenance.exporter == chosen.exporter
    assert contract.provenance.options["path"] == chosen.path
    assert contract.provenance.options["opset"] == report.opset == 17
    assert contract.provenance.lineage is not None
    assert contract.signature.dims["seq"].max == 19
    assert contract_paths(out)[1].exists()


def test_a_cnn_from_the_keras_command_reports_every_path_in_json(tf_models, tmp_path) -> None:
    out = tmp_path / "cnn.onnx"
    result = runner.invoke(
        app, ["export", "keras", str(tf_models / "cnn.keras"), "-o", str(out), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["passed"] and document["opset"] == 17
    assert [c["chosen"] for c in document["candidates"]].count(True) == 1
    assert sorted(s["label"] for s in document["parity"]["samples"]) == [
        "batch=1",
        "batch=32",
        "batch=7",
    ]
    assert _dims(out, "image") == ["batch", 16, 16, 3]


def test_multi_head_attention_passes_at_three_batches_and_sequence_lengths(
    tf_models, tmp_path
) -> None:
    out = tmp_path / "mha.onnx"
    # Keras' own exporter alone: tf2onnx-keras takes 3x longer on this model for the same graph
    report = export_tf(tf_models / "mha.keras", TfExportConfig(out=out, paths=("keras-onnx",)))
    assert report.passed, report.reason
    assert _sizes(report, "batch") == {1, 7, 32} and _sizes(report, "tokens_1") == {1, 10, 19}
    assert [c.path for c in report.candidates] == ["keras-onnx"]
    assert report.exporter == "keras 3.15.1 (model.export onnx)"


def test_a_custom_layer_is_loaded_from_the_file_that_registers_it(tf_models, tmp_path) -> None:
    out = tmp_path / "custom.onnx"
    report = export_tf(
        tf_models / "custom.keras",
        TfExportConfig(out=out, custom_objects=(TF_LAYERS,), paths=("tf2onnx-keras",)),
    )
    assert report.passed, report.reason
    assert _sizes(report, "batch") == {1, 7, 32}


def test_a_custom_layer_without_its_file_names_the_class_and_the_flag(tf_models, tmp_path) -> None:
    out = tmp_path / "custom.onnx"
    result = runner.invoke(app, ["export", "tf", str(tf_models / "custom.keras"), "-o", str(out)])
    assert result.exit_code == 2, result.output  # an input TensorFlow cannot load, as documented
    text = " ".join(result.stderr.split())
    assert "TensorFlow cannot load" in text and "ScaledSoftsign" in text
    assert "--custom-objects layers.py" in text
    assert not out.exists()


def test_a_custom_objects_file_that_fails_to_import_is_blamed_not_the_model(
    tf_models, tmp_path
) -> None:
    broken = tmp_path / "broken_layers.py"
    broken.write_text("import keras\nraise RuntimeError('half-written layers')\n")
    with pytest.raises(ConfigError) as caught:
        export_tf(
            tf_models / "custom.keras",
            TfExportConfig(out=tmp_path / "m.onnx", custom_objects=(broken,)),
        )
    assert caught.value.field == "custom_objects"
    assert "broken_layers.py" in caught.value.message
    assert "half-written layers" in caught.value.message
    assert "cannot load" not in caught.value.message


def test_a_keras_file_through_the_saved_model_path_leaves_no_saved_model_behind(
    tf_models, tmp_path, monkeypatch
) -> None:
    # TensorFlow's process makes its temporary folders under TMPDIR (read at its start)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    report = export_tf(
        tf_models / "custom.keras",
        TfExportConfig(
            out=tmp_path / "m.onnx",
            custom_objects=(TF_LAYERS,),
            paths=("tf2onnx-saved-model",),
            contract=False,
        ),
    )
    assert report.passed, report.reason
    assert [p.name for p in scratch.iterdir()] == []


def test_a_pythonpath_meant_for_onnxgate_does_not_reach_tensorflow(
    tf_models, tmp_path, monkeypatch
) -> None:
    # a package of the same name as TensorFlow's on onnxgate's path (a stub, another build)
    shadow = tmp_path / "shadow" / "tensorflow"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not TensorFlow')\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow.parent))
    report = export_tf(
        tf_models / "scorer", TfExportConfig(out=tmp_path / "m.onnx", contract=False)
    )
    assert report.passed, report.reason


def test_a_saved_model_with_a_tf_function_signature_converts_with_its_output_names(
    tf_models, tmp_path
) -> None:
    out = tmp_path / "scorer.onnx"
    # the libraries the parity session registers are recorded, as torch's export records them
    config = TfExportConfig(out=out, ops_libraries=("onnxruntime-extensions",))
    report = export_tf(tf_models / "scorer", config)
    assert report.passed, report.reason
    assert [c.path for c in report.candidates] == ["tf2onnx-saved-model"]
    assert {o.name for o in report.parity.outputs} == {"scores", "total"}
    assert _sizes(report, "batch") == {1, 7, 32}
    contract = load_contract(out)
    assert contract.provenance is not None
    assert contract.provenance.framework == "tensorflow 2.21.0"
    assert contract.provenance.exporter == "tf2onnx 1.17.0 (saved-model)"
    assert [lib.name for lib in contract.requirements.ops_libraries] == ["onnxruntime-extensions"]


def test_an_op_tf2onnx_cannot_convert_is_named_with_its_keras_layer(tf_models, tmp_path) -> None:
    out = tmp_path / "eig.onnx"
    with pytest.raises(ExportError) as caught:
        export_tf(
            tf_models / "eig.keras",
            TfExportConfig(out=out, custom_objects=(TF_LAYERS,), paths=("tf2onnx-keras",)),
        )
    message, hint = caught.value.message, caught.value.hint or ""
    assert "SelfAdjointEigV2" in message and "Keras layer 'eigen'" in message
    assert "no handler for it at any opset" in hint
    assert caught.value.exit_code == 1 and not out.exists()


def test_an_op_a_later_opset_converts_is_named_with_that_opset_which_then_works(
    tf_models, tmp_path
) -> None:
    out = tmp_path / "bits.onnx"
    result = runner.invoke(
        app,
        ["export", "tf", str(tf_models / "bits.keras"), "-o", str(out)]
        + ["--custom-objects", str(TF_LAYERS), "--path", "tf2onnx-keras"],
    )
    assert result.exit_code == 1, result.output
    text = " ".join(result.stderr.split())
    assert "BitwiseAnd" in text and "Keras layer 'low_bits'" in text and "at opset 17" in text
    assert "converts BitwiseAnd from opset 18: export with --opset 18" in text
    report = export_tf(
        tf_models / "bits.keras",
        TfExportConfig(out=out, opset=18, custom_objects=(TF_LAYERS,), paths=("tf2onnx-keras",)),
    )
    assert report.passed and report.opset == 18
    assert all(o.max_abs == 0 for o in report.parity.outputs)


# No TensorFlow needed: refused before its environment is asked for.


def test_a_missing_custom_objects_file_is_named_by_its_flag_before_tensorflow_starts(
    tmp_path, monkeypatch
) -> None:
    (tmp_path / "m.keras").write_bytes(b"")
    monkeypatch.setenv("ONNXGATE_ENV_DIR", str(tmp_path / "no-envs-here"))  # never built
    result = runner.invoke(
        app,
        ["export", "keras", str(tmp_path / "m.keras"), "-o", str(tmp_path / "m.onnx")]
        + ["--custom-objects", str(tmp_path / "layers.py")],
    )
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "--custom-objects" in text and "layers.py" in text
    assert not (tmp_path / "no-envs-here").exists()


def test_a_folder_is_not_a_keras_file_and_a_saved_model_has_one_path(tmp_path) -> None:
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    with pytest.raises(ConfigError, match="is not a Keras file"):
        export_tf(tmp_path / "sm", TfExportConfig(out=tmp_path / "m.onnx", format="keras"))
    with pytest.raises(ConfigError, match="does not apply to a SavedModel folder"):
        export_tf(tmp_path / "sm", TfExportConfig(out=tmp_path / "m.onnx", paths=("keras-onnx",)))
    with pytest.raises(ConfigError, match="neither a Keras file"):
        export_tf(tmp_path, TfExportConfig(out=tmp_path / "m.onnx"))
    result = runner.invoke(
        app, ["export", "tf", str(tmp_path / "sm"), "-o", "m.onnx", "--path", "tf2onnx"]
    )
    assert result.exit_code == 2
    assert "'tf2onnx' is not one of 'tf2onnx-keras', 'tf2onnx-saved-model'" in result.output


def test_an_environment_that_cannot_be_built_is_exit_3_naming_the_toolchain(
    tmp_path, monkeypatch
) -> None:
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ONNXGATE_ENV_DIR", str(blocker / "envs"))
    result = runner.invoke(
        app,
        ["export", "tf", str(tmp_path / "sm"), "-o", str(tmp_path / "m.onnx")]
        + ["--tf-version", "2.20.0"],
    )
    assert result.exit_code == 3, result.output
    text = " ".join(result.output.split())
    assert "tensorflow-cpu==2.20.0 tf2onnx==1.17.0 keras==3.15.1" in text
    assert "ONNXGATE_ENV_DIR" in text
