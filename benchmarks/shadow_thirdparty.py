"""Shadow serving and drift watching on third-party ONNX models (issue 32, models nobody here made).

For each corpus model (``../shared/corpus``: FastestDet, ultraface RFB-320, image_classifier32,
keras2onnx Conv+LSTM), in ``~/.cache/onnxgate-bench/shadow-3p/MODEL/``, every step through the
real CLI, each command in a process of its own:

1. **Contract**: ``contract init`` on 8 golden inputs (the classifier, whose batch axis is free:
   64 rows proved at batch 1 and 64) of the model's domain (``_thirdparty_traffic``:
   smooth random-field images at normal brightness, preprocessed as the model expects; sums of
   sinusoids for the 1-D model). First with the default rules (``default/``), then ``verify``:
   what a user who accepts the defaults gets; then the champion with ``--atol 1e-4 --rtol 1e-3``
   (the tolerance ONNX Runtime's graph optimisations need on these models).
2. **Candidates**: *faithful*: the champion as ONNX Runtime's basic-level optimiser rewrites it
   (constant folding, Conv+BatchNorm and other standard-op fusions; ``optimized_model_filepath``),
   contract-inited with the same inputs and rules; *quantised*: ``onnxgate quantize`` int8 static
   (images, QDQ with calibration images), int8 dynamic and fp16, every attempt's verdict kept,
   each written one a candidate; *planted bad*: one Conv's weight plus Gaussian noise of 5% of its
   standard deviation, contract-inited against its own goldens (its contract holds: it must fail
   in shadow only).
3. **Serve**: ``serve NAME=champion --shadow NAME=... (each candidate) --watch --watch-window W``,
   traffic with tritonclient, one request (batch 1: the models' batch axis is fixed) at a time:
   a reference window of W unshifted inputs, two windows of W other unshifted inputs, then the
   same 2 W inputs brightness-shifted (× ``--shift``; for the 1-D model the signal's amplitude).
   After each window: every tensor's drift score (against the reference window and the goldens)
   and alert from ``/metrics``; after the unshifted and the shifted phases: ``GET
   /v2/models/NAME/shadow``.

Usage::

    python benchmarks/shadow_thirdparty.py [--models fastestdet,ultraface,convlstm] [--window 40]

Results: ``results/shadow_thirdparty.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import shadow_minilm  # noqa: E402
from _thirdparty_traffic import natural_images, perturb_conv, signals  # noqa: E402
from serve_bench import PY, Server, free_port  # noqa: E402
from shadow_load import isa  # noqa: E402
from shadow_minilm import drain, env, get_json, metrics, run, series  # noqa: E402

CORPUS = Path(os.environ.get("ONNXGATE_CORPUS", HERE.parent.parent / "shared" / "corpus"))
CACHE = Path.home() / ".cache" / "onnxgate-bench" / "shadow-3p"
TOLERANCE = ["--atol", "1e-4", "--rtol", "1e-3"]
GOLDEN, EVAL = 8, 8


def _unit(x: np.ndarray) -> np.ndarray:
    return x


def _ultraface(x: np.ndarray) -> np.ndarray:
    """Ultraface's preprocessing: (pixel - 127) / 128 on 0-255 pixels."""
    return ((x * 255.0 - 127.0) / 128.0).astype(np.float32)


MODELS = {
    "fastestdet": {
        "file": "FastestDet.onnx",
        "input": "input",
        "shape": (352, 352),
        "pre": _unit,
        "what": "detector, opset 16, [1,3,352,352] in [0,1] → [1,484,85] (4 box columns in pixels, objectness, 80 class scores per cell)",
    },
    "ultraface": {
        "file": "ultraface_rfb320.onnx",
        "input": "input",
        "shape": (240, 320),
        "pre": _ultraface,
        "what": "face detector, opset 9 + 7 other opset imports, [1,3,240,320] as (pixel-127)/128 → scores [1,4420,2], boxes [1,4420,4]",
    },
    "classifier32": {
        "file": "image_classifier32.onnx",
        "input": "modelInput",
        "shape": (32, 32),
        "pre": _unit,
        "batch_dim": "batch_size",
        "what": "PyTorch 1.10 image classifier, opset 11, modelInput [batch_size,3,32,32] in [0,1] → modelOutput [batch_size,10] (raw class scores, no Softmax)",
    },
    "convlstm": {
        "file": "convcommon_test_model_1.onnx",
        "input": "input_1",
        "shape": (512,),
        "pre": _unit,
        "what": "keras2onnx Conv1D+LSTM, opset 11, input_1 [1,1,512] → conv1d_1 [1,1,512]",
    },
}


def raw_inputs(spec: dict, n: int, seed: int) -> np.ndarray:
    """``n`` unshifted inputs of the model's domain, before preprocessing, batch axis first."""
    if len(spec["shape"]) == 1:
        return signals(n, spec["shape"][0], seed=seed)
    return natural_images(n, *spec["shape"], seed=seed)


def feed(spec: dict, raw: np.ndarray) -> np.ndarray:
    """One request's input ``[1, ...]`` from one raw input."""
    return np.ascontiguousarray(spec["pre"](raw[None]).astype(np.float32))


def write_folder(folder: Path, spec: dict, raw: np.ndarray) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, one in enumerate(raw):
        np.savez(folder / f"s{i}.npz", **{spec["input"]: feed(spec, one)})
    return folder


def faithful_graph(source: Path, target: Path) -> None:
    """ONNX Runtime's basic-level rewrite of ``source`` (standard ops only), written to ``target``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def tail(done: subprocess.CompletedProcess) -> str:
    """The command's output without its indented detail lines, cut to its end."""
    text = (done.stdout + "\n" + done.stderr).strip().splitlines()
    return "\n".join(line for line in text if not line.startswith("    "))[-2500:] if text else ""


def prepare(key: str, args, log: list) -> dict:
    """Champion, default-rule probe and candidates of one model: what each command said."""
    spec = MODELS[key]
    work = args.work / key
    if work.exists():
        shutil.rmtree(work)
    stem = Path(spec["file"]).stem
    champion = work / "champion" / spec["file"]
    champion.parent.mkdir(parents=True)
    shutil.copyfile(CORPUS / spec["file"], champion)
    if spec.get("batch_dim"):  # a free batch axis: one file of 64 rows, proved at batch 1 and 64
        golden = work / "golden.npz"
        rows = raw_inputs(spec, 64, seed=100)
        np.savez(golden, **{spec["input"]: spec["pre"](rows).astype(np.float32)})
        golden_args = ["--inputs", str(golden), "--dim", f"{spec['batch_dim']}=1,64"]
    else:
        golden = write_folder(work / "golden", spec, raw_inputs(spec, GOLDEN, seed=100))
        golden_args = ["--inputs", str(golden)]
    evaluation = write_folder(work / "eval", spec, raw_inputs(spec, EVAL, seed=200))
    out: dict = {"what": spec["what"], "steps": {}}

    # what the defaults give: contract init, verify, and whether serve admits the model
    default = work / "default" / spec["file"]
    default.parent.mkdir()
    shutil.copyfile(champion, default)
    init = run(["contract", "init", str(default), *golden_args], log=log, expect=None)
    verify = run(["verify", str(default)], log=log, expect=None)
    out["default"] = {
        "init_exit": init.returncode,
        "init": tail(init),
        "verify_exit": verify.returncode,
        "verify": tail(verify),
    }
    if init.returncode == 0 and verify.returncode != 0:
        out["default"]["serve"] = serve_probe(stem, default, args)

    init_args = [*golden_args, *TOLERANCE]
    done = run(["contract", "init", str(champion), *init_args], log=log)
    out["steps"]["champion"] = tail(done)
    candidates: dict[str, Path] = {}

    faithful = work / "faithful" / spec["file"]
    faithful.parent.mkdir()
    faithful_graph(champion, faithful)
    done = run(["contract", "init", str(faithful), *init_args], log=log, expect=None)
    out["steps"]["faithful"] = {"exit": done.returncode, "text": tail(done)}
    if done.returncode == 0:
        candidates["faithful"] = faithful

    attempts = [("int8-dynamic", ["--allow-slower"]), ("fp16", ["--to", "fp16"])]
    if len(spec["shape"]) == 2:
        calibration = write_folder(work / "calib", spec, raw_inputs(spec, 8, seed=300))
        attempts.insert(
            0,
            (
                "int8-static",
                ["--mode", "static", "--calibration", str(calibration), "--allow-slower"],
            ),
        )
    out["quantize"] = {}
    for label, extra in attempts:
        target = work / label / f"{stem}.{label}.onnx"
        target.parent.mkdir()
        done = run(
            ["quantize", str(champion), "-o", str(target), "--eval", str(evaluation),
             "--bench-budget", "0.3", *extra],
            log=log, expect=None,
        )  # fmt: skip
        out["quantize"][label] = {"exit": done.returncode, "text": tail(done)}
        if done.returncode != 0 and "second opinion" in done.stdout + done.stderr:
            # the refusal's own hint: keep the float parent's golden outputs unchecked
            done = run(
                ["quantize", str(champion), "-o", str(target), "--eval", str(evaluation),
                 "--bench-budget", "0.3", "--no-second-opinion", *extra],
                log=log, expect=None,
            )  # fmt: skip
            out["quantize"][f"{label} --no-second-opinion"] = {
                "exit": done.returncode,
                "text": tail(done),
            }
        if done.returncode == 0 and target.is_file():
            candidates[label] = target

    bad = work / "bad" / spec["file"]
    out["planted"] = perturb_conv(champion, bad, which=0.5, scale=0.05)
    done = run(["contract", "init", str(bad), *init_args], log=log, expect=None)
    out["steps"]["bad"] = {"exit": done.returncode, "text": tail(done)}
    if done.returncode == 0:
        candidates["bad"] = bad
    out["candidates"] = {k: str(v) for k, v in candidates.items()}
    out["champion"] = str(champion)
    return out


def server_for(name: str, model: Path, extra: list[str], label: str, args) -> Server:
    http = free_port()
    command = [
        PY, "-m", "onnxgate", "serve", f"{name}={model}", "--allow-ungated",
        "--http-port", str(http), "--grpc-port", "0", "--placement-check", "0", *extra,
    ]  # fmt: skip
    server = Server(label, command, http, 0, args.work / f"{label}.log", env=env())
    server.command = "onnxgate " + " ".join(command[3:])
    return server


def status(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()[:600]
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()[:600]
    except OSError as err:
        return 0, str(err)


def serve_probe(name: str, model: Path, args) -> dict:
    """Serve the default-rule model: is it ready, and what do the server and a request say?"""
    server = server_for(name, model, ["--no-watch"], f"{name}-default", args)
    try:
        deadline = time.monotonic() + 90
        ready = (0, "")
        while time.monotonic() < deadline and server.process.poll() is None:
            ready = status(server.http, f"/v2/models/{name}/ready")
            if ready[0] == 200 or "prov" in server.log.read_text(errors="replace"):
                break
            time.sleep(1)
        time.sleep(2)
        health = status(server.http, "/v2/health/ready")
        log_text = server.log.read_text(errors="replace")
    finally:
        server.stop()
    return {
        "model_ready": ready,
        "server_ready": health,
        "log": "\n".join(log_text.splitlines()[-8:])[-2000:],
    }


def windows_done(text: str, name: str) -> int:
    return int(
        sum(
            s["value"]
            for s in series(text, "onnxgate_drift_windows_total")
            if s["labels"].get("model") == name
        )
    )


def slim_record(record: dict) -> dict:
    for cand in record.get("candidates", []):
        cand["worst"] = cand.get("worst", [])[:3]
        cand.pop("newest", None)
    return record


def trial(key: str, prepared: dict, args) -> dict:
    """Serve the champion with every candidate in shadow and the watch on; the phases' figures."""
    import tritonclient.http as http

    spec = MODELS[key]
    name = Path(spec["file"]).stem
    extra = [x for path in prepared["candidates"].values() for x in ("--shadow", f"{name}={path}")]
    extra += ["--shadow-fraction", "1.0", "--shadow-queue", "64"]
    extra += ["--watch", "--watch-window", str(args.window), "--watch-threshold", "0.25"]
    server = server_for(name, Path(prepared["champion"]), extra, f"{name}-shadow", args)
    w = args.window
    raw = raw_inputs(spec, 3 * w, seed=0)
    phases = [
        ("reference", raw[:w], 1.0),
        ("unshifted 1", raw[w : 2 * w], 1.0),
        ("unshifted 2", raw[2 * w :], 1.0),
        (f"shifted ×{args.shift} 1", raw[w : 2 * w], args.shift),
        (f"shifted ×{args.shift} 2", raw[2 * w :], args.shift),
    ]
    out: dict = {"serve": server.command, "window_rows": w, "windows": [], "records": {}}
    started = time.monotonic()
    try:
        server.wait_ready(name, timeout=300)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not all(
            c["shadowing"] for c in get_json(server.http, f"/v2/models/{name}/shadow")["candidates"]
        ):
            time.sleep(0.5)  # every candidate proven (or given up on) before the first request
        client = http.InferenceServerClient(f"127.0.0.1:{server.http}", network_timeout=120)
        for i, (label, block, factor) in enumerate(phases):
            for one in block:
                x = feed(
                    spec, np.clip(one * factor, 0, 1) if len(spec["shape"]) == 2 else one * factor
                )
                tensor = http.InferInput(spec["input"], list(x.shape), "FP32")
                tensor.set_data_from_numpy(x, binary_data=True)
                client.infer(name, [tensor])
            drain(server.http, name=name, limit=300)
            deadline = time.monotonic() + 120
            while (
                windows_done(text := metrics(server.http), name) < i + 1
                and time.monotonic() < deadline
            ):
                time.sleep(0.5)
            out["windows"].append(
                {
                    "phase": label,
                    "requests": len(block),
                    "windows_done": windows_done(text, name),
                    "score": series(text, "onnxgate_drift_score"),
                    "alert": series(text, "onnxgate_drift_alert"),
                    "quantile": series(text, "onnxgate_drift_quantile"),
                    "outside": series(text, "onnxgate_input_outside_golden_total"),
                    "shed": series(text, "onnxgate_drift_shed_total"),
                }
            )
            if label == "unshifted 2" or i == len(phases) - 1:
                out["records"]["unshifted" if label == "unshifted 2" else "all"] = slim_record(
                    get_json(server.http, f"/v2/models/{name}/shadow")
                )
        out["shadow_metrics"] = {
            n: series(text, n)
            for n in (
                "onnxgate_shadow_pairs_total",
                "onnxgate_shadow_shed_total",
                "onnxgate_shadow_rule_failures_total",
            )
        }
    finally:
        server.stop()
    out["seconds"] = round(time.monotonic() - started, 1)
    out["log_tail"] = "\n".join(server.log.read_text(errors="replace").splitlines()[-15:])[-3000:]
    return out


def detector_figures(key: str, prepared: dict, args) -> dict | None:
    """What the shadow's rules do not say about a detector: per candidate, against the champion on
    the unshifted traffic (in this process, ONNX Runtime defaults), box and score errors apart,
    the cosine of the score columns alone beside the whole tensor's, and whether the most
    confident cell (and, for FastestDet, its class) is the same."""
    import onnxruntime as ort

    spec = MODELS[key]
    raw = raw_inputs(spec, 3 * args.window, seed=0)[args.window :]
    if key == "classifier32":
        return classifier_figures(spec, prepared, raw)
    if key not in ("fastestdet", "ultraface"):
        return None

    def parts(outputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        if key == "fastestdet":  # [1, 484, 85]: 4 box columns in pixels, objectness, 80 classes
            return outputs[0][0, :, :4], outputs[0][0, :, 4:]
        return outputs[1][0], outputs[0][0]  # boxes [4420, 4] in [0, 1]; scores [4420, 2]

    def answers(path: str) -> list[tuple[np.ndarray, np.ndarray]]:
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return [parts(session.run(None, {spec["input"]: feed(spec, one)})) for one in raw]

    def cosine(a: np.ndarray, b: np.ndarray) -> float:
        a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))

    champion = answers(prepared["champion"])
    found = {}
    for label, path in prepared["candidates"].items():
        theirs = answers(path)
        top, top_class, whole, scores = [], [], [], []
        for (cb, cs), (tb, ts) in zip(champion, theirs, strict=True):
            confidence_c, confidence_t = (
                cs[:, 0] if key == "fastestdet" else cs[:, 1],
                ts[:, 0] if key == "fastestdet" else ts[:, 1],
            )
            top.append(int(np.argmax(confidence_c)) == int(np.argmax(confidence_t)))
            if key == "fastestdet":
                cell = int(np.argmax(confidence_c))
                top_class.append(int(np.argmax(cs[cell, 1:])) == int(np.argmax(ts[cell, 1:])))
            whole.append(cosine(np.concatenate([cb, cs], 1), np.concatenate([tb, ts], 1)))
            scores.append(cosine(cs, ts))
        found[label] = {
            "images": len(raw),
            "box_max_abs": float(
                max(np.abs(c[0] - t[0]).max() for c, t in zip(champion, theirs, strict=True))
            ),
            "score_max_abs": float(
                max(np.abs(c[1] - t[1]).max() for c, t in zip(champion, theirs, strict=True))
            ),
            "min_cosine_whole": min(whole),
            "min_cosine_scores": min(scores),
            "top_cell_agreement": sum(top) / len(top),
            "top_cell_class_agreement": sum(top_class) / len(top_class) if top_class else None,
            "champion_max_confidence": float(
                max((c[1][:, 0] if key == "fastestdet" else c[1][:, 1]).max() for c in champion)
            ),
        }
    found["confidence drift"] = confidence_drift(key, prepared, raw, args.shift)
    return found


def classifier_figures(spec: dict, prepared: dict, raw: np.ndarray) -> dict:
    """Per candidate, against the champion on the unshifted traffic: the class scores' largest
    difference, the worst row cosine and how often the top class is the same."""
    import onnxruntime as ort

    def answers(path: str) -> np.ndarray:
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        x = spec["pre"](raw).astype(np.float32)
        return session.run(None, {spec["input"]: x})[0]

    champion = answers(prepared["champion"])
    found = {}
    for label, path in prepared["candidates"].items():
        theirs = answers(path)
        dot = (champion * theirs).sum(1)
        norms = np.linalg.norm(champion, axis=1) * np.linalg.norm(theirs, axis=1)
        found[label] = {
            "images": len(raw),
            "max_abs": float(np.abs(champion - theirs).max()),
            "min_row_cosine": float((dot / np.maximum(norms, 1e-30)).min()),
            "top1_agreement": float((champion.argmax(1) == theirs.argmax(1)).mean()),
        }
    return {"classifier": found}


def confidence_drift(key: str, prepared: dict, raw: np.ndarray, shift: float) -> dict:
    """The champion's confidence column alone (FastestDet's objectness, ultraface's face score) on
    the unshifted and the shifted images, binned as the watch bins (``golden_edges`` of the
    golden values): the PSI a per-column watch would have shown, beside the whole tensor's."""
    import onnxruntime as ort

    from onnxgate.serve._watch import golden_edges, psi

    spec = MODELS[key]
    champion = Path(prepared["champion"])
    output, column = ("output", 4) if key == "fastestdet" else ("scores", 1)
    with np.load(champion.with_suffix(".golden.npz")) as golden:
        values = np.concatenate(
            [golden[k][..., column].ravel() for k in golden if k.endswith(f"/out/{output}")]
        )
    edges, _ = golden_edges(values.astype(np.float64), 20)
    session = ort.InferenceSession(str(champion), providers=["CPUExecutionProvider"])
    index = [o.name for o in session.get_outputs()].index(output)

    def histogram(factor: float) -> np.ndarray:
        counts = np.zeros(edges.size + 1)
        for one in raw:
            x = feed(spec, np.clip(one * factor, 0, 1))
            v = session.run(None, {spec["input"]: x})[index][..., column].ravel()
            counts += np.bincount(np.searchsorted(edges, v, side="right"), minlength=edges.size + 1)
        return counts

    half = len(raw) // 2
    unshifted = histogram(1.0)
    first = np.zeros_like(unshifted)
    for one in raw[:half]:  # the first half alone, to set beside the second as the watch does
        x = feed(spec, one)
        v = session.run(None, {spec["input"]: x})[index][..., column].ravel()
        first += np.bincount(np.searchsorted(edges, v, side="right"), minlength=edges.size + 1)
    shifted = histogram(shift)
    return {
        "column": f"{output}[..., {column}]",
        "psi_unshifted_halves": psi(unshifted - first, first),
        "psi_shifted_vs_unshifted": psi(shifted, unshifted),
    }


# --- the report --------------------------------------------------------------------------------


def fmt(value, digits: int = 3) -> str:
    """``shadow_minilm.fmt`` with three significant digits by default."""
    return shadow_minilm.fmt(value, digits)


def markdown(doc: dict) -> str:
    lines = [
        "# Shadow and drift watching on third-party ONNX models (`benchmarks/shadow_thirdparty.py`)",
        "",
        f"Command: `{doc['command']}` at onnxgate `{doc['commit']}`, {doc['started']}; ISA {doc['isa']}; "
        f"load average {doc['load_average_start']} at start, {doc['load_average_end']} at the end "
        f"(2 vCPUs, shared; nothing here is a timing). {doc['seconds']} s in all.",
        "",
        "Models from `../shared/corpus`, copied to `~/.cache/onnxgate-bench/shadow-3p/`. Inputs: smooth "
        "random-field images (five octaves of upsampled Gaussian grids, colour field, tint, sensor "
        "noise; mean ≈ 0.45) or sums of sinusoids (`benchmarks/_thirdparty_traffic.py`). Contracts: "
        f"8 golden inputs (the classifier: 64 rows in one file, proved at batch 1 and 64), `{' '.join(TOLERANCE)}`; shifted traffic = the same inputs × {doc['shift']} "
        "(images clipped to [0, 1] before the model's preprocessing).",
        "",
    ]
    if doc.get("notes"):
        lines += ["## Reading", ""] + [f"- {n}" for n in doc["notes"]] + [""]
    for key, m in doc["models"].items():
        lines += [f"## {key}: `{MODELS[key]['file']}`", "", m["what"], ""]
        d = m.get("default", {})
        lines += [
            f"**Default rules** (`contract init --inputs golden/`): exit {d.get('init_exit')}; "
            f"`verify`: exit {d.get('verify_exit')}.",
            "",
            "```",
            *d.get("verify", "").splitlines()[-5:],
            "```",
            "",
        ]
        if "serve" in d:
            s = d["serve"]
            lines += [
                f"Served as is: model ready → HTTP {s['model_ready'][0]}, server ready → HTTP {s['server_ready'][0]}.",
                "",
                "```",
                *s["log"].splitlines()[-4:],
                "```",
                "",
            ]
        lines += ["**Quantize attempts** (`onnxgate quantize champion --eval eval/ ...`):", ""]
        for label, q in m.get("quantize", {}).items():
            last = [x for x in q["text"].splitlines() if x.strip()]
            verdict = next(
                (x for x in reversed(last) if x.startswith(("PASS", "FAIL", "error"))),
                last[-1] if last else "",
            )
            lines.append(f"- {label}: exit {q['exit']}: {verdict[:400]}")
        p = m.get("planted", {})
        lines += [
            "",
            f"Planted bad: `{p.get('node')}` weight `{p.get('weight')}` {p.get('shape')} + noise "
            f"{p.get('noise_scale_of_std')} × std; its own contract init exit {m['steps'].get('bad', {}).get('exit')}. "
            f"Candidates served: {', '.join(m.get('candidates', {})) or 'none'}.",
            "",
        ]
        t = m.get("trial")
        if not t:
            lines += [f"Trial not run: {m.get('trial_error', '?')}", ""]
            continue
        lines += [
            f"`{t['serve']}` ({t['seconds']} s)",
            "",
            "### Shadow (`GET /v2/models/NAME/shadow` after all traffic)",
            "",
        ]
        lines += [
            "| candidate | shadowing | pairs | passed | failed | errors | shed / runs cancelled | output | rule | failed | max abs | min cosine | first failure |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        before = {
            c["candidate"]: c for c in t["records"].get("unshifted", {}).get("candidates", [])
        }
        for cand in t["records"]["all"]["candidates"]:
            label = next(
                (k for k, v in m["candidates"].items() if cand["candidate"].endswith(v)),
                cand["candidate"],
            )
            un = before.get(cand["candidate"], {})
            head = (
                f"| {label} | {cand['shadowing']}{' (' + str(cand['reason'])[:100] + ')' if cand.get('reason') else ''} "
                f"| {cand.get('pairs')} | {cand.get('passed')} (unshifted: {un.get('passed')}/{un.get('pairs')}) "
                f"| {cand.get('failed')} | {cand.get('errors')} | {cand['shed']['queue_full']}/{cand.get('cancelled', '–')} "
            )
            outputs = cand.get("outputs") or {"–": None}
            for j, (output, f) in enumerate(outputs.items()):
                prefix = head if j == 0 else "| | | | | | | "
                if f is None:
                    lines.append(prefix + "| – | – | – | – | – | – |")
                    continue
                reason = (f.get("first_failure") or "–").replace("|", "\\|")[:150]
                lines.append(
                    f"{prefix}| {output} | `{f.get('rule')}` | {f.get('failed')} | {fmt(f.get('max_abs'))} "
                    f"| {fmt(f.get('min_cosine'), 6)} | {reason} |"
                )
        if m.get("detector"):
            lines += [
                "",
                "### What the rules do not say: the same unshifted images in this process, candidate against champion",
                "",
                "| candidate | images | box max abs | score max abs | min cosine, whole output | min cosine, score columns | most confident cell same | its class same | champion's highest confidence |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
            for label, f in m["detector"].get("classifier", {}).items():
                lines.append(
                    f"| {label} | {f['images']} | – | {fmt(f['max_abs'])} | {fmt(f['min_row_cosine'], 6)} "
                    f"| – | {f['top1_agreement']:.0%} (top-1 over the batch) | – | – |"
                )
            for label, f in m["detector"].items():
                if label in ("confidence drift", "classifier"):
                    continue
                lines.append(
                    f"| {label} | {f['images']} | {fmt(f['box_max_abs'])} | {fmt(f['score_max_abs'])} "
                    f"| {fmt(f['min_cosine_whole'], 6)} | {fmt(f['min_cosine_scores'], 6)} "
                    f"| {f['top_cell_agreement']:.0%} | {fmt(f['top_cell_class_agreement'])} | {fmt(f['champion_max_confidence'])} |"
                )
            c = m["detector"].get("confidence drift")
            if c:
                lines += [
                    "",
                    f"The champion's confidence column `{c['column']}` alone, on the watch's golden-quantile bins: "
                    f"PSI {fmt(c['psi_unshifted_halves'])} between the two halves of the unshifted images, "
                    f"{fmt(c['psi_shifted_vs_unshifted'])} shifted against unshifted.",
                ]
        lines += ["", "### Drift (PSI per window; alert at > 0.25)", ""]
        tensors = sorted(
            {(s["labels"]["kind"], s["labels"]["tensor"]) for w in t["windows"] for s in w["score"]}
        )
        lines += [
            "| window | "
            + " | ".join(f"{k} `{n}` ref / golden" for k, n in tensors)
            + " | alerts |",
            "|---|" + "---|" * (len(tensors) + 1),
        ]
        for w in t["windows"]:
            sc = {
                (s["labels"]["kind"], s["labels"]["tensor"], s["labels"]["against"]): s["value"]
                for s in w["score"]
            }
            raised = [
                f"{s['labels']['kind']} {s['labels']['tensor']}"
                for s in w["alert"]
                if s["value"] >= 1
            ]
            cells = [
                f"{fmt(sc.get((k, n, 'reference')))} / {fmt(sc.get((k, n, 'golden')))}"
                for k, n in tensors
            ]
            lines.append(
                f"| {w['phase']} | " + " | ".join(cells) + f" | {', '.join(raised) or 'none'} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--work", type=Path, default=CACHE)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--window", type=int, default=40, help="watch window rows (= requests)")
    parser.add_argument("--shift", type=float, default=0.4, help="brightness (amplitude) factor")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "shadow_thirdparty.json")
    parser.add_argument("--render", action="store_true", help="the Markdown of the JSON written")
    args = parser.parse_args(argv)
    if args.render:
        doc = json.loads(args.out.read_text())
        args.out.with_suffix(".md").write_text(markdown(doc))
        return doc
    if not CORPUS.is_dir():
        raise SystemExit(f"{CORPUS} is absent; set ONNXGATE_CORPUS to the shared corpus")
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    doc: dict = {
        "tool": "shadow_thirdparty",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(
            [
                "python",
                "benchmarks/shadow_thirdparty.py",
                *(argv if argv is not None else sys.argv[1:]),
            ]
        ),
        "commit": subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "isa": isa(),
        "shift": args.shift,
        "models": {},
    }
    if args.out.is_file():
        doc["notes"] = json.loads(args.out.read_text()).get("notes", [])
    log: list[dict] = []
    for key in args.models.split(","):
        print(f"== {key}", file=sys.stderr)
        prepared = prepare(key, args, log)
        try:
            prepared["trial"] = trial(key, prepared, args)
        except (SystemExit, OSError, RuntimeError) as err:
            prepared["trial_error"] = str(err)[-2000:]
        prepared["detector"] = detector_figures(key, prepared, args)
        doc["models"][key] = prepared
    doc["seconds"] = round(time.monotonic() - started)
    doc["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    (args.work / "log.json").write_text(json.dumps(log, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str))
    args.out.with_suffix(".md").write_text(markdown(doc))
    print(args.out.with_suffix(".md").read_text())
    return doc


if __name__ == "__main__":
    main()
