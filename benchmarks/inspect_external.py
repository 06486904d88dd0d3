"""Describing a model whose external data totals several GB costs about as much as a small one.

Builds two models in a temporary folder: MatMul with a 4x3 weight stored inline, and the same
graph with a 6 GiB weight in a sparse external-data file (no disk is used for the zeros). Times
`inspect_model` and `check_model` on each (median of 20 runs, each in this one process, since
neither touches a runtime thread pool) and prints the ratio.

    python benchmarks/inspect_external.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxgate import check_model, inspect_model, runtime_profile

BIG = 6 * 2**30


def build(folder: Path) -> tuple[Path, Path]:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])
    small_w = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g", [x], [y], [small_w]
    )
    small = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    small.ir_version = 10
    onnx.save_model(small, folder / "small.onnx")

    columns = BIG // 4 // 4
    big_w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, columns])
    big_w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "big.bin"), ("offset", "0"), ("length", str(BIG))):
        big_w.external_data.add(key=key, value=value)
    with open(folder / "big.bin", "wb") as handle:
        handle.truncate(BIG)  # sparse: the file is 6 GiB long, the disk holds nothing
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g", [x], [y], [big_w]
    )
    big = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    big.ir_version = 10
    onnx.save_model(big, folder / "big.onnx")
    return folder / "small.onnx", folder / "big.onnx"


def median_ms(fn, runs: int = 20) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    profile = runtime_profile()
    with tempfile.TemporaryDirectory() as tmp:
        small, big = build(Path(tmp))
        assert inspect_model(big).external_data.bytes == BIG
        rows = []
        for label, fn in (
            ("inspect", inspect_model),
            ("check", lambda p: check_model(p, profile=profile)),
        ):
            for path in (small, big, small, big):  # interleaved: A B A B
                rows.append((label, path.name, median_ms(lambda p=path, f=fn: f(p))))
    for label in ("inspect", "check"):
        s = statistics.median(ms for lab, name, ms in rows if lab == label and name == "small.onnx")
        b = statistics.median(ms for lab, name, ms in rows if lab == label and name == "big.onnx")
        print(f"{label}: small {s:.2f} ms, 6 GiB external {b:.2f} ms, ratio {b / s:.2f}")


if __name__ == "__main__":
    main()
