"""Custom Keras layers of the TensorFlow export tests, run inside TensorFlow's environment.

``export tf --custom-objects tests/tf_layers.py`` imports this file there before loading a model
that holds them (it imports only Keras and TensorFlow; onnxgate is not installed there).
"""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="onnxgate_tests")
class ScaledSoftsign(keras.layers.Layer):
    """A subclassed layer whose call uses primitive ops: x * w / (1 + |x|) + b, a trained w."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="w")
        self.b = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="b")

    def call(self, x):
        return tf.math.divide(x * self.w, 1.0 + tf.math.abs(x)) + self.b


@keras.saving.register_keras_serializable(package="onnxgate_tests")
class Eigenvalues(keras.layers.Layer):
    """Eigenvalues of x xᵀ: tf.linalg.eigvalsh is SelfAdjointEigV2, which tf2onnx cannot convert."""

    def call(self, x):
        return tf.linalg.eigvalsh(tf.matmul(x, x, transpose_b=True))


@keras.saving.register_keras_serializable(package="onnxgate_tests")
class LowBits(keras.layers.Layer):
    """x & 6 on integers: tf.bitwise.bitwise_and, which tf2onnx converts from opset 18 only."""

    def call(self, x):
        return tf.bitwise.bitwise_and(x, tf.constant(6, dtype=x.dtype))
