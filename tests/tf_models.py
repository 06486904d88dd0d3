"""Build the TensorFlow export tests' models: ``python tf_models.py FOLDER`` in TensorFlow's env.

Run once per test session with the interpreter of TensorFlow's isolated environment
(``onnxgate.runners.tf_python``); it writes small seeded models into FOLDER and nothing is
committed. Each is small enough that loading and converting it takes well under a second.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from tf_layers import Eigenvalues, LowBits, ScaledSoftsign  # noqa: E402

L = keras.layers


def cnn() -> keras.Model:
    """Conv2D + pooling + Dense on 16x16 RGB images; only the batch is dynamic."""
    x = keras.Input((16, 16, 3), name="image")
    h = L.Conv2D(8, 3, activation="relu", name="conv")(x)
    h = L.MaxPooling2D(name="pool")(h)
    h = L.Flatten(name="flat")(h)
    return keras.Model(x, L.Dense(5, name="logits")(h), name="cnn")


def lstm() -> keras.Model:
    """An LSTM over a dynamic sequence length of 4 features."""
    x = keras.Input((None, 4), name="series")
    h = L.LSTM(8, name="lstm")(x)
    return keras.Model(x, L.Dense(3, name="head")(h), name="lstm")


def mha() -> keras.Model:
    """Self-attention (MultiHeadAttention) with a residual and LayerNormalization; dynamic seq."""
    x = keras.Input((None, 16), name="tokens")
    a = L.MultiHeadAttention(num_heads=2, key_dim=8, name="attention")(x, x)
    h = L.LayerNormalization(name="norm")(x + a)
    return keras.Model(x, L.Dense(4, name="out")(h), name="mha")


def custom() -> keras.Model:
    """A subclassed layer of primitive ops between two Dense layers."""
    x = keras.Input((6,), name="features")
    h = L.Dense(8, name="dense_in")(x)
    h = ScaledSoftsign(name="scaled_softsign")(h)
    return keras.Model(x, L.Dense(2, name="dense_out")(h), name="custom")


def eig() -> keras.Model:
    """A layer tf2onnx cannot convert (SelfAdjointEigV2)."""
    x = keras.Input((4,), name="x")
    h = L.Reshape((2, 2), name="square")(L.Dense(4, name="dense_a")(x))
    return keras.Model(x, Eigenvalues(name="eigen")(h), name="eig")


def bits() -> keras.Model:
    """A layer tf2onnx converts only from opset 18 (BitwiseAnd), on int32 inputs."""
    x = keras.Input((4,), name="codes", dtype="int32")
    return keras.Model(x, LowBits(name="low_bits")(x), name="bits")


class Scorer(tf.Module):
    """A plain tf.Module with a tf.function signature: y = tanh(x W + b), summed per row too."""

    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable(tf.random.stateless_normal((5, 3), seed=(1, 2)))
        self.b = tf.Variable(tf.random.stateless_normal((3,), seed=(3, 4)))

    @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32, name="x")])
    def __call__(self, x):
        y = tf.tanh(tf.matmul(x, self.w) + self.b)
        return {"scores": y, "total": tf.reduce_sum(y, axis=1)}


def main(folder: Path) -> None:
    keras.utils.set_random_seed(0)
    for build in (cnn, lstm, mha, custom, eig, bits):
        build().save(folder / f"{build.__name__}.keras")
    scorer = Scorer()
    tf.saved_model.save(
        scorer, str(folder / "scorer"), signatures={"serving_default": scorer.__call__}
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
