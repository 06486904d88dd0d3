"""What the watch tests share: an image-like classifier whose golden inputs have a known
brightness distribution, a model that answers NaN and infinities, and a Hub run in-process."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxgate.contract import ContractConfig, init_contract
from onnxgate.serve._hub import Hub, ServeConfig
from onnxgate.serve._predictor import PredictorConfig
from onnxgate.serve._types import InferRequest, RequestTensor
from onnxgate.serve._watch import WatchSettings
from onnxgate.settings import FeedSettings

GOLDEN_IMAGES = 64


def images(rng: np.random.Generator, n: int, shift: float = 0.0) -> np.ndarray:
    """``n`` 3x8x8 images: a brightness drawn in [0.3, 0.7] (+ ``shift``) plus pixel noise."""
    bright = rng.uniform(0.3, 0.7, (n, 1, 1, 1)) + shift
    return np.clip(bright + rng.uniform(-0.25, 0.25, (n, 3, 8, 8)), 0, 1).astype(np.float32)


def _save(graph: onnx.GraphProto, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def make_image_contract(path: Path) -> Path:
    """x float32 [batch, 3, 8, 8] → probs [batch, 4]: the class is the mean brightness's quarter
    (below 0.4, to 0.5, to 0.6, above), so brighter traffic moves values AND the top class.

    Golden samples: ``GOLDEN_IMAGES`` images of ``images`` (seed 1) at batch 64, 1 and 7.
    """
    slopes = np.array([0, 10, 20, 30], np.float32) / 3  # per channel: the mean of 3 channels
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=0),
        helper.make_node("MatMul", ["m", "w"], ["z"]),
        helper.make_node("Add", ["z", "b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "img",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 4])],
        [
            numpy_helper.from_array(np.tile(slopes, (3, 1)), "w"),
            numpy_helper.from_array(np.array([0, -4, -9, -15], np.float32), "b"),
            numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
        ],
    )
    _save(graph, path)
    data = path.parent / "golden_inputs.npz"
    np.savez(data, x=images(np.random.default_rng(1), GOLDEN_IMAGES))
    init_contract(
        path, ContractConfig(feeds=FeedSettings(inputs=data, dims={"batch": [1, GOLDEN_IMAGES]}))
    )
    return path


def make_log_contract(path: Path) -> Path:
    """x float32 [batch, 4] → y = log(x): NaN below 0, -inf at 0. Goldens: x in [0.5, 2]."""
    graph = helper.make_graph(
        [helper.make_node("Log", ["x"], ["y"])],
        "log",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    _save(graph, path)
    data = path.parent / "log_inputs.npz"
    x = np.random.default_rng(3).uniform(0.5, 2.0, (16, 4)).astype(np.float32)
    np.savez(data, x=x)
    init_contract(path, ContractConfig(feeds=FeedSettings(inputs=data, dims={"batch": [1, 16]})))
    return path


def config(**watch: Any) -> ServeConfig:
    """Ungated files, no alias polling, the watch settings given."""
    return ServeConfig(
        predictor=PredictorConfig(allow_ungated=True),
        poll_seconds=0,
        watch=WatchSettings(**watch),
    )


def run_hub(model: Path, settings: ServeConfig, body: Callable[[Hub], Awaitable[Any]]) -> Any:
    """Load ``model`` in a Hub, run ``body(hub)`` in the same event loop, stop the Hub."""

    async def main() -> Any:
        hub = Hub(settings)
        await hub.load([str(model)])
        try:
            return await body(hub)
        finally:
            await hub.stop()

    return asyncio.run(main())


async def infer(hub: Hub, name: str, x: np.ndarray) -> dict[str, np.ndarray]:
    """One request of ``x`` as input ``x``; the outputs by name."""
    answer = await hub.infer(InferRequest(name, None, [RequestTensor("x", "FP32", x)]))
    return dict(answer.outputs)


def samples(text: str, metric: str) -> dict[str, float]:
    """``{labels: value}`` of one metric's samples in exposition text (labels as written)."""
    found = {}
    for line in text.splitlines():
        match = re.match(rf"{metric}(\{{[^}}]*\}})? (\S+)$", line)
        if match:
            found[match.group(1) or ""] = float(match.group(2))
    return found


def value(text: str, metric: str, **labels: str) -> float | None:
    """The value of the one sample of ``metric`` whose labels include ``labels``."""
    hits = [
        v
        for written, v in samples(text, metric).items()
        if all(f'{k}="{want}"' in written for k, want in labels.items())
    ]
    assert len(hits) <= 1, f"{metric} {labels}: {len(hits)} samples"
    return hits[0] if hits else None


async def infer_tokens(hub: Hub, name: str = "tok") -> np.ndarray:
    """One request of the token model (``_serve_helpers.make_token_model``); its logits."""
    ids = np.array([[1, 2, 3]], np.int64)
    mask = np.ones_like(ids)
    answer = await hub.infer(
        InferRequest(
            name, None, [RequestTensor("ids", "INT64", ids), RequestTensor("mask", "INT64", mask)]
        )
    )
    return dict(answer.outputs)["logits"]
