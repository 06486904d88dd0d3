"""Inputs and a planted bad variant for third-party models (``shadow_thirdparty.py`` and its test).

Images are smooth random fields, not uniform noise: a luminance field summed over five octaves
of bilinearly upsampled Gaussian grids (amplitude halving with each doubling of frequency, as
natural images' spectra fall), a low-frequency colour field per channel, a per-image tint and
exposure, and a little sensor noise; mean about 0.45, standard deviation about 0.19, in [0, 1].
"Brightness shifted" traffic is the same images times a factor (an underexposed camera).
Signals (for the 1-D Keras model) are sums of four sinusoids plus noise.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper


def _upsample(grid: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear resize of ``[..., gh, gw]`` to ``[..., h, w]``."""
    gh, gw = grid.shape[-2:]
    ys, xs = np.linspace(0, gh - 1, h), np.linspace(0, gw - 1, w)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, gh - 1), np.minimum(x0 + 1, gw - 1)
    fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
    top, bottom = grid[..., y0, :], grid[..., y1, :]
    upper = top[..., :, x0] * (1 - fx) + top[..., :, x1] * fx
    lower = bottom[..., :, x0] * (1 - fx) + bottom[..., :, x1] * fx
    return upper * (1 - fy) + lower * fy


def natural_images(n: int, h: int, w: int, *, seed: int = 0) -> np.ndarray:
    """``n`` images float32 ``[n, 3, h, w]`` in [0, 1] (see the module docstring)."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, 3, h, w), np.float32)
    for i in range(n):
        lum = np.zeros((h, w))
        for cells, amp in ((3, 1.0), (6, 0.5), (12, 0.25), (24, 0.12), (48, 0.06)):
            lum += amp * _upsample(rng.standard_normal((cells, cells)), h, w)
        lum = (lum - lum.mean()) / (lum.std() + 1e-9)
        chroma = _upsample(rng.standard_normal((3, 4, 4)), h, w) * 0.3
        tint = rng.uniform(-0.08, 0.08, (3, 1, 1))
        img = 0.45 + rng.uniform(-0.08, 0.08) + 0.18 * (lum[None] + chroma) + tint
        img += rng.normal(0, 0.01, img.shape)
        out[i] = np.clip(img, 0, 1)
    return out


def signals(n: int, length: int, *, seed: int = 0) -> np.ndarray:
    """``n`` signals float32 ``[n, 1, length]``: four sinusoids of random amplitude, frequency
    and phase, plus Gaussian noise of 0.05."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, length)
    out = np.empty((n, 1, length), np.float32)
    for i in range(n):
        wave = sum(
            rng.uniform(0.1, 0.5) * np.sin(2 * np.pi * (rng.uniform(1, 40) * t + rng.uniform()))
            for _ in range(4)
        )
        out[i, 0] = wave + rng.normal(0, 0.05, length)
    return out


def perturb_conv(
    source: Path, target: Path, *, which: float = 0.5, scale: float = 0.05, seed: int = 0
) -> dict:
    """Write ``target``: ``source`` with one Conv's weight plus Gaussian noise of ``scale`` × its
    standard deviation; the Conv is the one at ``which`` (0 first, 1 last) of the Conv nodes
    whose weight is an initializer. Returns what was changed."""
    model = onnx.load(str(source))
    inits = {i.name: i for i in model.graph.initializer}
    convs = [n for n in model.graph.node if n.op_type == "Conv" and n.input[1] in inits]
    node = convs[min(int(which * len(convs)), len(convs) - 1)]
    init = inits[node.input[1]]
    weight = numpy_helper.to_array(init)
    noise = np.random.default_rng(seed).standard_normal(weight.shape) * scale * float(weight.std())
    init.CopyFrom(numpy_helper.from_array((weight + noise).astype(weight.dtype), init.name))
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))
    return {
        "node": node.name or f"Conv #{convs.index(node)} of {len(convs)} (unnamed)",
        "weight": init.name,
        "shape": list(weight.shape),
        "noise_scale_of_std": scale,
        "seed": seed,
    }
