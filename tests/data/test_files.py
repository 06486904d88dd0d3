"""The one data-file reader is total: hostile .npy, .npz, JSON and .pb files are exit 2, named.

Each file here is one the adversarial probe of issue 17 crashed onnxgate with (exit 4), or one of
its kind: an object array, empty files and archives, a file that is not a zip, headers that
declare terabytes, a zip bomb, JSON junk, a TensorProto that lies about its size.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from numpy.lib import format as npy_format
from onnx import SequenceProto, TensorProto, numpy_helper
from typer.testing import CliRunner

from models import mlp, save
from onnxgate._pathtext import shown
from onnxgate.cli import app
from onnxgate.data import load_feeds
from onnxgate.data._files import (
    MAX_DATA_BYTES_ENV,
    json_array,
    max_data_bytes,
    read_arrays,
    read_json,
    read_npy,
    read_npz,
    read_pb,
)
from onnxgate.errors import ConfigError, DataFileError, FeedError
from onnxgate.export import read_matrix
from onnxgate.model import Signature
from onnxgate.quantize import QuantizeConfig
from onnxgate.quantize._data import load_labels

runner = CliRunner()
TIB4 = (1 << 20, 1 << 20)  # float32: 4 TiB
MLP = Signature.from_graph(mlp().graph)
NOT_UTF8 = os.fsdecode(b"out\xff.onnx")  # how Python hands over argv bytes that are not UTF-8


def lying_npy(shape=TIB4, data: bytes = b"\0" * 64) -> bytes:
    """An .npy whose header declares ``shape`` float32 and that holds ``data`` after it."""
    buffer = io.BytesIO()
    npy_format.write_array_header_1_0(
        buffer, {"descr": "<f4", "fortran_order": False, "shape": shape}
    )
    return buffer.getvalue() + data


def npz_bytes(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --- the defects the probe found ---------------------------------------------------------------


def test_empty_npy_is_refused(tmp_path):
    path = write(tmp_path / "empty.npy", b"")
    for read in (read_npy, read_matrix, read_arrays):
        with pytest.raises(DataFileError, match=r"empty\.npy: is empty \(0 bytes\)"):
            read(path)


def test_empty_npz_and_empty_archive_are_refused(tmp_path):
    empty = write(tmp_path / "empty.npz", b"")
    with pytest.raises(DataFileError, match=r"empty\.npz: is empty \(0 bytes\)"):
        load_feeds(empty)
    archive = tmp_path / "hollow.npz"
    zipfile.ZipFile(archive, "w").close()
    for read in (read_npz, read_matrix, load_feeds):
        with pytest.raises(DataFileError, match=r"hollow\.npz: holds no arrays"):
            read(archive)


@pytest.mark.parametrize("content", [b"hello, not a zip\n", b"PK\x03\x04 truncated"])
def test_npz_that_is_not_a_zip_is_refused(tmp_path, content):
    path = write(tmp_path / "data.npz", content)
    with pytest.raises(DataFileError, match="data.npz: is not a readable .npz archive") as info:
        load_feeds(path)
    assert "not a zip file" in info.value.message
    with pytest.raises(DataFileError, match="data.npz: is neither a .npy array nor a .npz"):
        read_matrix(path)


def test_npy_header_declaring_4_tib_is_refused_before_allocating(tmp_path):
    path = write(tmp_path / "huge.npy", lying_npy())
    with pytest.raises(DataFileError, match="huge.npy: is truncated or its header lies") as info:
        read_matrix(path)  # was MemoryError: numpy allocates shape x itemsize first
    assert "float32 [1048576, 1048576] (4.0 TiB)" in info.value.message
    assert "holds 64 bytes" in info.value.message


def test_npz_member_header_that_lies_is_refused_naming_the_member(tmp_path):
    path = tmp_path / "lie.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", lying_npy())
    with pytest.raises(DataFileError, match=r"lie\.npz member 'x\.npy': is truncated") as info:
        load_feeds(path)
    assert "4.0 TiB" in info.value.message


def test_object_array_is_refused_without_unpickling(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, X=np.array([{"a": 1}, None], dtype=object))
    for read in (read_npz, read_matrix, load_feeds):
        with pytest.raises(DataFileError, match="member 'X.npy': holds an object array"):
            read(path)
    np.save(tmp_path / "obj.npy", np.array([1, "a", None], dtype=object), allow_pickle=True)
    with pytest.raises(DataFileError, match=r"obj\.npy: holds an object array"):
        read_npy(tmp_path / "obj.npy")


@pytest.mark.sklearn
def test_export_sklearn_with_an_object_array_is_exit_2_naming_the_file(tmp_path):
    import joblib
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 3))
    joblib.dump(LogisticRegression().fit(x, x[:, 0] > 0), tmp_path / "lr.joblib")
    data = tmp_path / "obj.npz"
    np.savez(data, X=np.array([[1.0, None, "a"]], dtype=object))
    out = tmp_path / "lr.onnx"
    args = ["export", "sklearn", str(tmp_path / "lr.joblib"), "-o", str(out), "--data", str(data)]
    result = runner.invoke(app, [*args, "--trust-pickle", "-f", "json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)
    assert error["error"] == "data-file"
    assert "obj.npz member 'X.npy': holds an object array" in error["message"]
    assert not out.exists()


# --- limits --------------------------------------------------------------------------------------


def test_the_cap_refuses_real_data_beyond_it_and_the_environment_sets_it(tmp_path, monkeypatch):
    path = tmp_path / "big.npy"
    np.save(path, np.zeros((64, 64), np.float32))  # 16 KiB
    assert read_npy(path).shape == (64, 64)
    monkeypatch.setenv(MAX_DATA_BYTES_ENV, "4096")
    with pytest.raises(DataFileError, match=r"big\.npy: declares float32 \[64, 64\], 16\.0 KiB"):
        read_npy(path)
    monkeypatch.setenv(MAX_DATA_BYTES_ENV, "lots")
    with pytest.raises(ConfigError, match=MAX_DATA_BYTES_ENV):
        max_data_bytes()


def test_zip_bomb_is_refused_from_the_zip_directory(tmp_path, monkeypatch):
    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, x=np.zeros(1 << 18, np.float32))  # 1 MiB of zeros, ~1 KiB on disk
    assert path.stat().st_size < 8192
    monkeypatch.setenv(MAX_DATA_BYTES_ENV, str(64 << 10))
    with pytest.raises(DataFileError, match="declare, uncompressed, 1.0 MiB") as info:
        read_npz(path)
    assert "more than the 64.0 KiB" in info.value.message


def test_every_prefix_and_corruption_of_a_data_file_is_data_or_a_data_file_error(tmp_path):
    sources = {
        "a.npz": (read_npz, npz_bytes(x=np.arange(6, dtype=">f4"), s=np.array(["ab", "c"]))),
        "a.npy": (read_npy, lying_npy((2, 2), np.arange(4, dtype="<f4").tobytes())),
        "a.pb": (
            read_pb,
            numpy_helper.from_array(np.ones((2, 3), np.float32), "x").SerializeToString(),
        ),
        "a.json": (read_json, json.dumps({"x": [[1, 2], [3, 4]]}).encode()),
    }
    rng = np.random.default_rng(0)
    for name, (read, data) in sources.items():
        path = tmp_path / name
        corrupted = []
        for _ in range(50):
            flipped = bytearray(data)
            flipped[rng.integers(len(data))] = rng.integers(256)
            corrupted.append(bytes(flipped))
        for variant in [data[:cut] for cut in range(len(data))] + corrupted:
            path.write_bytes(variant)
            try:
                read(path)
            except DataFileError as err:
                assert shown(path) in err.message
        path.write_bytes(data)
        assert read(path) is not None


def test_arrays_come_back_in_native_byte_order(tmp_path):
    path = tmp_path / "big_endian.npz"
    np.savez(path, x=np.arange(4, dtype=">f4"))
    x = read_npz(path)["x"]
    assert x.dtype == np.float32 and x.dtype.isnative
    np.testing.assert_array_equal(x, [0, 1, 2, 3])


@pytest.mark.parametrize(
    ("array", "expected"),
    [
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime64"),
        (np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]), "structured"),
        (np.zeros(2, dtype=np.longdouble), "which no ONNX tensor type can hold"),
    ],
    ids=["datetime", "structured", "longdouble"],
)
def test_dtypes_onnx_cannot_take_are_refused(tmp_path, array, expected):
    np.save(tmp_path / "a.npy", array)
    with pytest.raises(DataFileError, match=expected):
        read_npy(tmp_path / "a.npy")


# --- JSON ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", r"is empty \(0 bytes\)"),
        (b"  \n", r"holds no JSON"),
        (b'{"x": [1, 2', "is not valid JSON: Expecting .* at line 1 column 12"),
        (b"\xff\xfe{}", "is not UTF-8 text"),
        (b"[" * 100_000 + b"]" * 100_000, "nests deeper"),
        (b'{"x": [' + b"9" * 5000 + b"]}", "is not readable JSON"),
        (b'{"x": [[1, 2, 3, 4], [5]]}', "input 'x' is not a regular nested list"),
        (b'{"x": [[1, null, 3, 4]]}', "input 'x': its values are of mixed types"),
        (b'{"x": {"a": 1}}', "input 'x': its values are of mixed types"),
        (b'[{"x": [[1, 2, 3, 4]]}, {"x": [["a", "b", "c", "d"]]}]', r"\[1\]: input 'x' expects"),
    ],
    ids=[
        "empty",
        "blank",
        "truncated",
        "not-utf8",
        "too-deep",
        "huge-int",
        "ragged",
        "null",
        "object",
        "strings",
    ],
)
def test_json_junk_is_refused_naming_file_and_key(tmp_path, content, expected):
    path = write(tmp_path / "in.json", content)
    with pytest.raises(FeedError, match=expected) as info:
        load_feeds(path, signature=MLP)
    assert info.value.message.startswith(str(path))


def test_json_string_that_is_no_character_is_refused():
    with pytest.raises(DataFileError, match="code point 0xd800, which is not a Unicode character"):
        json_array(["a", "\ud800"], "in.json: input 's'")


# --- TensorProto .pb -----------------------------------------------------------------------------


def test_pb_whose_dims_declare_more_than_it_holds_is_refused(tmp_path):
    tensor = numpy_helper.from_array(np.zeros(4, np.float32), "x")
    tensor.dims[:] = [1 << 40]
    path = write(tmp_path / "input_0.pb", tensor.SerializeToString())
    with pytest.raises(DataFileError, match=r"input_0\.pb tensor 'x': declares float32") as info:
        load_feeds(path)
    assert "(4.0 TiB of raw_data) and holds 16 bytes" in info.value.message
    typed = TensorProto(name="x", data_type=TensorProto.FLOAT, dims=[3, 4], float_data=[1.0])
    write(path, typed.SerializeToString())
    with pytest.raises(DataFileError, match=r"\(12 values in float_data\) and holds 1"):
        load_feeds(path)


def test_pb_with_external_data_is_refused(tmp_path):
    tensor = TensorProto(name="x", data_type=TensorProto.FLOAT, dims=[4])
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "/etc/passwd"
    path = write(tmp_path / "x.pb", tensor.SerializeToString())
    with pytest.raises(DataFileError, match="external file .*/etc/passwd.*refused"):
        load_feeds(path)


def test_pb_junk_and_a_lying_sequence_are_refused(tmp_path):
    path = write(tmp_path / "junk.pb", b"\xff" * 7)
    with pytest.raises(DataFileError, match=r"junk\.pb: is not a readable TensorProto"):
        load_feeds(path)
    sequence = numpy_helper.from_list([np.zeros(3, np.float32)], "xs")
    sequence.tensor_values[0].dims[:] = [1 << 40]
    write(path, sequence.SerializeToString())
    with pytest.raises(DataFileError, match="truncated or its dims lie"):
        read_pb(path, SequenceProto)


# --- every command that takes data goes through the reader -------------------------------------


def _lie_in_member(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", lying_npy())


BAD_FILES = {
    "object": lambda path: np.savez(path, x=np.array([None, {}], dtype=object)),
    "not-zip": lambda path: path.write_text("x,y\n1,2\n"),
    "lying": _lie_in_member,
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_compare_and_quantize_refuse_a_bad_data_file_with_exit_2(tmp_path, kind):
    model = save(mlp(), tmp_path / "mlp.onnx")
    bad = tmp_path / "bad.npz"
    BAD_FILES[kind](bad)
    runs = [
        ["compare", str(model), "--inputs", str(bad)],
        ["quantize", str(model), "-o", str(tmp_path / "q.onnx"), "--mode", "static"]
        + ["--calibration", str(bad), "--no-bench"],
        ["quantize", str(model), "-o", str(tmp_path / "q.onnx"), "--eval", str(bad), "--no-bench"],
    ]
    for args in runs:
        result = runner.invoke(app, [*args, "-f", "json"])
        assert result.exit_code == 2, (args, result.output)
        error = json.loads(result.stdout)
        assert error["error"] == "data-file", error
        assert "bad.npz" in error["message"]
    assert not (tmp_path / "q.onnx").exists()


def test_labels_go_through_the_reader(tmp_path):
    with pytest.raises(DataFileError, match=r"labels\.npy: is truncated"):
        load_labels(write(tmp_path / "labels.npy", lying_npy()), 3)
    with pytest.raises(FeedError, match="beyond 64 bits"):
        load_labels(write(tmp_path / "labels.txt", b"1 2 99999999999999999999999"), 3)
    with pytest.raises(FeedError, match=r"labels\.json'?: its values are of mixed types"):
        load_labels(write(tmp_path / "labels.json", b'{"a": 1}'), 1)
    np.testing.assert_array_equal(load_labels(write(tmp_path / "l.txt", b"0 2\n1"), 3), [0, 2, 1])


# --- file names that are not UTF-8 ---------------------------------------------------------------


def test_config_with_a_non_utf8_out_dumps_to_json_with_escapes():
    config = QuantizeConfig(out=Path(NOT_UTF8), eval=NOT_UTF8)
    assert config.out == Path(NOT_UTF8)  # the name that opens the file is kept
    dumped = json.loads(config.model_dump_json())
    assert dumped["out"] == dumped["eval"] == "out\\xff.onnx"


def test_data_file_with_a_non_utf8_name_is_read_and_labelled_representably(tmp_path):
    path = tmp_path / os.fsdecode(b"in\xff.npz")
    np.savez(path, x=np.ones((2, 4), np.float32))
    (sample,) = load_feeds(path, signature=MLP)
    assert sample.label == "in\\xff.npz"
    sample.label.encode("utf-8")  # representable in a contract, a report, a terminal


def test_quantize_writes_to_an_output_name_that_is_not_utf8(tmp_path):
    save(mlp(), tmp_path / "mlp.onnx")
    np.savez(tmp_path / "eval.npz", x=np.random.default_rng(0).uniform(size=(8, 4)).astype("f4"))
    out = b"q\xff.onnx"
    done = subprocess.run(
        [sys.executable, "-m", "onnxgate", "quantize", "mlp.onnx", "-o", out]
        + ["--eval", "eval.npz", "--no-bench", "-f", "json"],
        cwd=tmp_path,
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    report = json.loads(done.stdout)
    assert report["passed"] is True
    assert (tmp_path / os.fsdecode(out)).is_file()


def _npy(descr: str, shape: tuple, data: bytes) -> bytes:
    buffer = io.BytesIO()
    npy_format.write_array_header_1_0(
        buffer, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return buffer.getvalue() + data


def test_strings_are_checked_in_place_not_as_python_strings(tmp_path):
    """Found in review: a list of every string took ~22x the array; at the cap, an OOM kill."""
    import tracemalloc

    texts = np.full(2_000_000, "中", dtype="<U1")  # 8 MB of code points
    path = write(tmp_path / "text.npz", npz_bytes(x=texts))
    tracemalloc.start()
    assert read_npz(path)["x"].shape == (2_000_000,)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 * texts.nbytes, f"peak {peak:,} bytes for an array of {texts.nbytes:,}"


@pytest.mark.parametrize("code", [0x110000, 0xD800, 0xFFFFFFFF])
def test_a_code_point_that_is_no_character_is_refused(tmp_path, code):
    path = write(tmp_path / "bad.npy", _npy("<U1", (1,), code.to_bytes(4, "little")))
    with pytest.raises(DataFileError, match="not a Unicode character"):
        read_npy(path)


def test_a_dimension_beyond_any_real_axis_is_refused(tmp_path):
    path = write(tmp_path / "huge.npy", _npy("<f4", (0, 2**64), b""))  # 0 bytes, NumPy overflows
    with pytest.raises(DataFileError, match="impossible shape"):
        read_npy(path)


def test_an_archive_of_too_many_members_is_refused_before_any_is_read(tmp_path):
    from onnxgate.data._files import MAX_MEMBERS

    path = tmp_path / "many.npz"
    with zipfile.ZipFile(path, "w") as archive:
        for index in range(MAX_MEMBERS + 1):
            archive.writestr(f"a{index}.npy", b"")
    with pytest.raises(DataFileError, match="members, more than"):
        read_npz(path)
