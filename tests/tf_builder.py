"""Small TensorFlow models for the tests, built and converted inside TensorFlow's environment.

Run with that environment's Python: ``python tf_builder.py FOLDER``. One process builds every
model (TensorFlow takes seconds to start) and converts with tf2onnx's command line code
(``python -m tf2onnx.convert --saved-model DIR --opset 17 --output X.onnx``, called in-process):
- ``sm/`` a SavedModel (x[N,4] -> MatMul, Add, Relu, MatMul -> logits) and ``sm.onnx``;
- ``renamed/`` the same function whose signature input is ``features`` (no ONNX file);
- ``cnn/`` a SavedModel of two channels-last convolutions (image[N,10,12,3] -> Conv2D 3x3x5,
  Relu, Conv2D 3x3x4 -> features[N,6,8,4]), which tf2onnx runs channels-first, and ``cnn.onnx``;
- ``model.keras`` a Keras Sequential model, exported as ``keras_sm/`` and converted to
  ``keras.onnx``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import tensorflow as tf


class Mlp(tf.Module):
    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.w1 = tf.Variable(rng.standard_normal((4, 8)).astype("float32"))
        self.b1 = tf.Variable(rng.standard_normal((8,)).astype("float32"))
        self.w2 = tf.Variable(rng.standard_normal((8, 3)).astype("float32"))

    def forward(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        h = tf.nn.relu(tf.matmul(x, self.w1) + self.b1)
        return {"logits": tf.matmul(h, self.w2)}


class Cnn(tf.Module):
    def __init__(self) -> None:
        rng = np.random.default_rng(1)
        self.k1 = tf.Variable(rng.standard_normal((3, 3, 3, 5)).astype("float32"))
        self.k2 = tf.Variable(rng.standard_normal((3, 3, 5, 4)).astype("float32"))

    @tf.function(input_signature=[tf.TensorSpec([None, 10, 12, 3], tf.float32, name="image")])
    def forward(self, image: tf.Tensor) -> dict[str, tf.Tensor]:
        h = tf.nn.relu(tf.nn.conv2d(image, self.k1, 1, "VALID"))
        return {"features": tf.nn.conv2d(h, self.k2, 1, "VALID")}


def convert(saved: Path, out: Path) -> None:
    from tf2onnx import convert as tf2onnx_convert

    argv = sys.argv
    sys.argv = ["tf2onnx.convert", "--saved-model", str(saved), "--opset", "17", "--output"]
    sys.argv.append(str(out))
    try:
        tf2onnx_convert.main()
    finally:
        sys.argv = argv


def main(folder: Path) -> None:
    mlp = Mlp()
    for name, input_name in (("sm", "x"), ("renamed", "features")):
        spec = tf.TensorSpec([None, 4], tf.float32, name=input_name)
        function = tf.function(mlp.forward, input_signature=[spec])
        tf.saved_model.save(mlp, str(folder / name), signatures={"serving_default": function})
    convert(folder / "sm", folder / "sm.onnx")
    cnn = Cnn()
    tf.saved_model.save(cnn, str(folder / "cnn"), signatures={"serving_default": cnn.forward})
    convert(folder / "cnn", folder / "cnn.onnx")

    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((4,), name="x"),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(3),
        ]
    )
    model.save(folder / "model.keras")
    model.export(str(folder / "keras_sm"), format="tf_saved_model", verbose=False)
    convert(folder / "keras_sm", folder / "keras.onnx")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
