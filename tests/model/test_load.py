"""Safe model loading: what ``load_model`` refuses, what it reads, and how the CLI reports it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import ModelProto, TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from onnxgate import ModelLoadError, UnsafeModelError, inspect_model, load_model
from onnxgate.cli import app

WEIGHTS = np.arange(12, dtype=np.float32).reshape(3, 4)
GiB = 2**30


def build_model(weight: TensorProto) -> ModelProto:
    """``Y = X + W``, with ``W`` the given initializer; IR 10 and opset 17 for the installed ORT."""
    dims = list(weight.dims)
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", weight.name], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, dims)],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def save_embedded(path: Path) -> Path:
    onnx.save_model(build_model(numpy_helper.from_array(WEIGHTS, "W")), path)
    return path


def save_external(path: Path) -> Path:
    """Save the model with ``W`` in ``w.bin`` next to it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(
        build_model(numpy_helper.from_array(WEIGHTS, "W")),
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="w.bin",
        size_threshold=0,
    )
    return path


def set_external(path: Path, **entries: str) -> None:
    """Rewrite external-data entries of the model's only initializer, leaving the side file alone."""
    proto = onnx.load(path, load_external_data=False)
    (tensor,) = proto.graph.initializer
    values = {entry.key: entry.value for entry in tensor.external_data}
    values.update(entries)
    del tensor.external_data[:]
    for key, value in values.items():
        tensor.external_data.add(key=key, value=value)
    onnx.save_model(proto, path)


@contextlib.contextmanager
def deadline(seconds: int = 10) -> Iterator[None]:
    """Fail instead of hanging, e.g. when a loader opens a FIFO nobody writes to."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds}s: something opened a FIFO")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def squash(text: str) -> str:
    """Text without whitespace, so a path wrapped by the terminal renderer still matches."""
    return "".join(text.split())


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    """A model with external data in ``tmp_path/model/``; ``tmp_path`` itself is "outside"."""
    return save_external(tmp_path / "model" / "model.onnx")


# --- files that are not ONNX models --------------------------------------------------------------


def _missing(path: Path) -> None:
    pass


def _folder(path: Path) -> None:
    path.mkdir()


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _text(path: Path) -> None:
    path.write_text("hello world\n")


def _json(path: Path) -> None:
    path.write_text('{"graph": {"node": []}, "ir_version": 10}\n')


def _zip(path: Path) -> None:
    path.write_bytes(b"PK\x03\x04" + bytes(26) + b"archive/data.pkl")


def _truncated(path: Path) -> None:
    data = save_embedded(path).read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _parses_but_not_a_model(message: bytes) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        ModelProto().ParseFromString(message)  # precondition: protobuf accepts these bytes
        path.write_bytes(message)

    return write


NOT_A_MODEL = {
    "missing": (_missing, "no such file"),
    "folder": (_folder, "folder"),
    "empty": (_empty, "empty"),
    "text": (_text, "not a valid onnx model"),
    "json": (_json, "json"),
    "zip": (_zip, "zip"),
    "truncated": (_truncated, "truncated"),
    "tensor-proto": (
        _parses_but_not_a_model(numpy_helper.from_array(WEIGHTS).SerializeToString()),
        "no graph",
    ),
    "graph-proto": (
        _parses_but_not_a_model(
            build_model(numpy_helper.from_array(WEIGHTS, "W")).graph.SerializeToString()
        ),
        "no graph",
    ),
}


@pytest.mark.parametrize(("make", "reason"), NOT_A_MODEL.values(), ids=NOT_A_MODEL.keys())
def test_not_a_model_is_a_load_error_naming_the_file(
    tmp_path: Path, make: Callable[[Path], None], reason: str
) -> None:
    path = tmp_path / "model.onnx"
    make(path)
    with pytest.raises(ModelLoadError) as caught:
        load_model(str(path))
    assert not isinstance(caught.value, UnsafeModelError)
    assert str(path) in str(caught.value)
    assert reason in str(caught.value).lower()


# --- external data that must not be read ---------------------------------------------------------


def _dotdot(folder: Path) -> str:
    (folder.parent / "secret.bin").write_bytes(bytes(WEIGHTS.nbytes))
    return "../secret.bin"


def _absolute_system(folder: Path) -> str:
    return "/etc/passwd"


def _absolute_outside(folder: Path) -> str:
    secret = folder.parent / "secret.bin"
    secret.write_bytes(bytes(WEIGHTS.nbytes))
    return str(secret)


def _symlink_out(folder: Path) -> str:
    secret = folder.parent / "secret.bin"
    secret.write_bytes(bytes(WEIGHTS.nbytes))
    (folder / "link.bin").symlink_to(secret)
    return "link.bin"


def _directory(folder: Path) -> str:
    (folder / "data.bin").mkdir()
    return "data.bin"


def _fifo_inside(folder: Path) -> str:
    os.mkfifo(folder / "pipe.bin")
    return "pipe.bin"


def _fifo_outside(folder: Path) -> str:
    os.mkfifo(folder.parent / "pipe.bin")
    return "../pipe.bin"


def _ort_memory_marker(folder: Path) -> str:
    # Some ONNX Runtime releases read the offset of this location as a memory address and crash.
    (folder / "*" / "_ORT_MEM_ADDR_").mkdir(parents=True)
    (folder / "*" / "_ORT_MEM_ADDR_" / "*").write_bytes(bytes(WEIGHTS.nbytes))
    return "*/_ORT_MEM_ADDR_/*"


UNSAFE = {
    "ort-memory-marker": _ort_memory_marker,
    "dotdot": _dotdot,
    "absolute-system": _absolute_system,
    "absolute-outside": _absolute_outside,
    "symlink-out": _symlink_out,
    "directory": _directory,
    "fifo-inside": _fifo_inside,
    "fifo-outside": _fifo_outside,
}


@pytest.mark.parametrize("load_weights", [False, True], ids=["lazy", "weights"])
@pytest.mark.parametrize("make", UNSAFE.values(), ids=UNSAFE.keys())
def test_unsafe_external_data_is_refused_before_reading(
    model_path: Path, make: Callable[[Path], str], load_weights: bool
) -> None:
    location = make(model_path.parent)
    set_external(model_path, location=location)
    # A loader that opened a FIFO would block forever; the deadline turns that into a failure.
    with deadline(10), pytest.raises(UnsafeModelError) as caught:
        load_model(model_path, load_weights=load_weights)
    assert str(model_path) in str(caught.value)
    assert location in str(caught.value)


def _delete_side_file(path: Path) -> str:
    (path.parent / "w.bin").unlink()
    return "does not exist"


def _truncate_side_file(path: Path) -> str:
    os.truncate(path.parent / "w.bin", WEIGHTS.nbytes // 2)
    return f"has only {WEIGHTS.nbytes // 2}"


def _offset_past_end(path: Path) -> str:
    set_external(path, offset="8")
    return f"has only {WEIGHTS.nbytes}"


def _length_not_shape(path: Path) -> str:
    set_external(path, length=str(WEIGHTS.nbytes - 4))  # still inside w.bin
    return f"needs {WEIGHTS.nbytes}"


def _offset_not_a_number(path: Path) -> str:
    set_external(path, offset="abc")
    return "offset"


def _negative_length(path: Path) -> str:
    set_external(path, length="-48")
    return "length"


BROKEN = {
    "missing": _delete_side_file,
    "truncated": _truncate_side_file,
    "offset-past-end": _offset_past_end,
    "length-not-shape": _length_not_shape,
    "offset-not-a-number": _offset_not_a_number,
    "negative-length": _negative_length,
}


@pytest.mark.parametrize("load_weights", [False, True], ids=["lazy", "weights"])
@pytest.mark.parametrize("breaks", BROKEN.values(), ids=BROKEN.keys())
def test_inconsistent_external_data_is_a_load_error(
    model_path: Path, breaks: Callable[[Path], str], load_weights: bool
) -> None:
    reason = breaks(model_path)
    with pytest.raises(ModelLoadError) as caught:
        load_model(model_path, load_weights=load_weights)
    assert not isinstance(caught.value, UnsafeModelError)
    message = str(caught.value)
    assert str(model_path) in message
    assert "'W'" in message
    assert reason in message


def test_missing_side_file_names_its_location(model_path: Path) -> None:
    set_external(model_path, location="weights-elsewhere.bin")
    with pytest.raises(ModelLoadError) as caught:
        load_model(model_path)
    assert not isinstance(caught.value, UnsafeModelError)
    assert "weights-elsewhere.bin" in str(caught.value)
    assert str(model_path) in str(caught.value)


def _not_a_directory(folder: Path) -> str:
    return "w.bin/extra"  # ENOTDIR


def _symlink_loop(folder: Path) -> str:
    (folder / "loop.bin").symlink_to("loop.bin")  # ELOOP
    return "loop.bin"


def _name_too_long(folder: Path) -> str:
    return "w" * 300 + ".bin"  # ENAMETOOLONG


def _nul_byte(folder: Path) -> str:
    return "w.bin\x00"  # protobuf strings may hold NUL; paths may not


UNREADABLE = {
    "not-a-directory": _not_a_directory,
    "symlink-loop": _symlink_loop,
    "name-too-long": _name_too_long,
    "nul-byte": _nul_byte,
}


@pytest.mark.parametrize("make", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_unresolvable_location_is_a_load_error(
    model_path: Path, make: Callable[[Path], str]
) -> None:
    set_external(model_path, location=make(model_path.parent))
    with pytest.raises(ModelLoadError) as caught:
        load_model(model_path)
    assert str(model_path) in str(caught.value)


# --- models that load -----------------------------------------------------------------------------


def test_external_data_is_located_but_not_read_by_default(model_path: Path) -> None:
    loaded = load_model(model_path)
    assert loaded.weights_loaded is False
    (tensor,) = loaded.proto.graph.initializer
    assert tensor.data_location == TensorProto.EXTERNAL
    assert not tensor.HasField("raw_data")
    assert loaded.external_bytes == WEIGHTS.nbytes
    (ref,) = loaded.external_data
    assert (ref.tensor, ref.location, ref.offset, ref.length) == ("W", "w.bin", 0, WEIGHTS.nbytes)
    assert ref.path == (model_path.parent / "w.bin").resolve()
    assert loaded.external_files == {"w.bin": WEIGHTS.nbytes}
    assert loaded.size_bytes == model_path.stat().st_size


def test_load_weights_reads_external_data(model_path: Path) -> None:
    loaded = load_model(model_path, load_weights=True)
    assert loaded.weights_loaded is True
    assert loaded.external_bytes == WEIGHTS.nbytes
    (tensor,) = loaded.proto.graph.initializer
    assert tensor.data_location == TensorProto.DEFAULT
    assert not tensor.external_data
    np.testing.assert_array_equal(numpy_helper.to_array(tensor), WEIGHTS)


def test_external_data_at_an_offset_is_read_from_there(model_path: Path) -> None:
    side = model_path.parent / "w.bin"
    side.write_bytes(b"\xff" * 16 + side.read_bytes())
    set_external(model_path, offset="16")
    loaded = load_model(model_path, load_weights=True)
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.proto.graph.initializer[0]), WEIGHTS)


def test_symlink_inside_the_folder_is_allowed(model_path: Path) -> None:
    (model_path.parent / "link.bin").symlink_to("w.bin")
    set_external(model_path, location="link.bin")
    loaded = load_model(model_path, load_weights=True)
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.proto.graph.initializer[0]), WEIGHTS)


def test_model_folder_reached_through_a_symlink_loads(model_path: Path, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(model_path.parent, target_is_directory=True)
    loaded = load_model(tmp_path / "alias" / "model.onnx", load_weights=True)
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.proto.graph.initializer[0]), WEIGHTS)


def test_embedded_model_loads_with_its_weights(tmp_path: Path) -> None:
    loaded = load_model(save_embedded(tmp_path / "model.onnx"))
    assert loaded.weights_loaded is True
    assert loaded.external_data == ()
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.proto.graph.initializer[0]), WEIGHTS)


# --- several GB of external data ------------------------------------------------------------------

BIG_ELEMENTS = 5 * 2**28  # float32: 5 GiB


@pytest.fixture
def big_model(tmp_path: Path) -> Path:
    """A model whose only weight is a 5 GiB float32 tensor in a sparse side file."""
    with open(tmp_path / "big.bin", "wb") as side:
        side.truncate(BIG_ELEMENTS * 4)
    weight = TensorProto(
        name="W",
        data_type=TensorProto.FLOAT,
        dims=[BIG_ELEMENTS],
        data_location=TensorProto.EXTERNAL,
    )
    for key, value in {"location": "big.bin", "offset": "0", "length": str(5 * GiB)}.items():
        weight.external_data.add(key=key, value=value)
    path = tmp_path / "big.onnx"
    onnx.save_model(build_model(weight), path)
    return path


def test_big_external_data_is_described_without_being_read(
    big_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = open

    def guarded_open(file, *args, **kwargs):
        assert not str(file).endswith("big.bin"), "the weights were opened"
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", guarded_open)
    monkeypatch.setattr(Path, "open", lambda self, *a, **k: guarded_open(self, *a, **k))
    loaded = load_model(big_model)
    assert loaded.weights_loaded is False
    assert loaded.external_bytes == 5 * GiB
    assert not loaded.proto.graph.initializer[0].HasField("raw_data")

    info = inspect_model(big_model)
    assert info.external_data.bytes == 5 * GiB
    assert info.external_data.tensors == 1
    assert [(f.location, f.bytes) for f in info.external_data.files] == [("big.bin", 5 * GiB)]
    assert info.parameters == BIG_ELEMENTS


def test_big_external_data_is_refused_when_weights_are_asked_for(big_model: Path) -> None:
    with pytest.raises(ModelLoadError) as caught:
        load_model(big_model, load_weights=True)
    assert str(big_model) in str(caught.value)
    assert "2 GiB" in str(caught.value)


# --- the CLI --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runtime_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnxgate-cache")


@pytest.fixture
def runner(runtime_cache: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    # `check` profiles the installed runtime first; keep that cache out of the user's home.
    monkeypatch.setenv("ONNXGATE_CACHE_DIR", str(runtime_cache))
    return CliRunner()


def _cli_missing(tmp_path: Path) -> Path:
    return tmp_path / "missing.onnx"


def _cli_truncated(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx"
    _truncated(path)
    return path


def _cli_dotdot(tmp_path: Path) -> Path:
    path = save_external(tmp_path / "model" / "model.onnx")
    set_external(path, location=_dotdot(path.parent))
    return path


def _cli_absolute(tmp_path: Path) -> Path:
    path = save_external(tmp_path / "model" / "model.onnx")
    set_external(path, location="/etc/passwd")
    return path


CLI_CASES = {
    "missing": (_cli_missing, "model-load"),
    "truncated": (_cli_truncated, "model-load"),
    "dotdot": (_cli_dotdot, "unsafe-model"),
    "absolute": (_cli_absolute, "unsafe-model"),
}


@pytest.mark.parametrize("command", ["inspect", "check"])
@pytest.mark.parametrize(("make", "code"), CLI_CASES.values(), ids=CLI_CASES.keys())
def test_cli_reports_bad_model_as_usage_error(
    tmp_path: Path, runner: CliRunner, make: Callable[[Path], Path], code: str, command: str
) -> None:
    path = make(tmp_path)
    result = runner.invoke(app, [command, str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert "error:" in result.stderr
    assert squash(str(path)) in squash(result.stderr)


@pytest.mark.parametrize("command", ["inspect", "check"])
@pytest.mark.parametrize(("make", "code"), CLI_CASES.values(), ids=CLI_CASES.keys())
def test_cli_reports_bad_model_as_one_json_document(
    tmp_path: Path, runner: CliRunner, make: Callable[[Path], Path], code: str, command: str
) -> None:
    path = make(tmp_path)
    result = runner.invoke(app, [command, str(path), "--format", "json"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    document = json.loads(result.stdout)
    assert document["error"] == code
    assert document["exit_code"] == 2
    assert str(path) in document["message"]


def test_cli_inspects_big_external_data_without_reading_it(
    big_model: Path, runner: CliRunner
) -> None:
    result = runner.invoke(app, ["inspect", str(big_model), "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["external_data"]["bytes"] == 5 * GiB
    assert document["parameters"] == BIG_ELEMENTS


@pytest.mark.parametrize("name", ["model[fp16].onnx", "model[/old].onnx"])
def test_cli_text_error_names_a_file_with_brackets(
    tmp_path: Path, runner: CliRunner, name: str
) -> None:
    path = tmp_path / name  # missing: the error message must still name it exactly
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert squash(str(path)) in squash(result.stderr)


def test_cli_unresolvable_location_is_a_usage_error(model_path: Path, runner: CliRunner) -> None:
    set_external(model_path, location=_not_a_directory(model_path.parent))
    result = runner.invoke(app, ["inspect", str(model_path), "--format", "json"])
    assert result.exit_code == 2, result.output
    document = json.loads(result.stdout)
    assert document["error"] == "model-load"
    assert str(model_path) in document["message"]


# --- found by review: corrupted text, strings, offsets, functions ----------------------------------


def test_invalid_utf8_in_a_name_is_a_load_error(tmp_path: Path) -> None:
    proto = build_model(numpy_helper.from_array(WEIGHTS, "W"))
    proto.graph.node[0].name = "Cxnv"
    data = proto.SerializeToString().replace(b"Cxnv", b"C\xb0nv")
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(data)
    with pytest.raises(ModelLoadError) as caught:
        load_model(path)
    assert str(path) in str(caught.value) and "UTF-8" in str(caught.value)


def test_string_tensor_in_external_data_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s.bin").write_bytes(b"abcd")
    tensor = TensorProto(name="S", data_type=TensorProto.STRING, dims=[1])
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in {"location": "s.bin", "offset": "100"}.items():
        tensor.external_data.add(key=key, value=value)
    path = tmp_path / "m.onnx"
    onnx.save_model(build_model(tensor), path)
    with pytest.raises(ModelLoadError, match="string tensor"):
        load_model(path)


def test_offset_past_the_end_without_a_length(model_path: Path) -> None:
    proto = onnx.load(model_path, load_external_data=False)
    (tensor,) = proto.graph.initializer
    entries = {e.key: e.value for e in tensor.external_data if e.key != "length"}
    entries["offset"] = str(10 * WEIGHTS.nbytes)
    del tensor.external_data[:]
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)
    onnx.save_model(proto, model_path)
    with pytest.raises(ModelLoadError, match="has only"):
        load_model(model_path)


def test_external_data_inside_a_function_subgraph_is_checked(tmp_path: Path) -> None:
    """An If branch inside a model-local function holds a Constant whose data escapes the folder."""
    (tmp_path / "secret.bin").write_bytes(bytes(WEIGHTS.nbytes))
    folder = tmp_path / "model"
    folder.mkdir()
    value = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=list(WEIGHTS.shape))
    value.data_location = TensorProto.EXTERNAL
    for key, entry in {"location": "../secret.bin", "offset": "0"}.items():
        value.external_data.add(key=key, value=entry)
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=value)],
        "branch",
        [],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, list(WEIGHTS.shape))],
    )
    function = helper.make_function(
        "local",
        "F",
        ["cond"],
        ["y"],
        [helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)],
        [helper.make_opsetid("", 17)],
    )
    graph = helper.make_graph(
        [helper.make_node("F", ["cond"], ["y"], domain="local")],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(WEIGHTS.shape))],
    )
    proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[function],
    )
    proto.ir_version = 10
    path = folder / "m.onnx"
    onnx.save_model(proto, path)
    with pytest.raises(UnsafeModelError, match="secret.bin"):
        load_model(path)
