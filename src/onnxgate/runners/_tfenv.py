"""TensorFlow's isolated environment: TensorFlow, Keras and tf2onnx, never in onnxgate's own.

TensorFlow 2.21 brings protobuf 7, and tritonclient (the deploy and test extras) pins protobuf
below 7, so the two cannot share one environment. The export from TensorFlow and Keras, and
TensorFlow as a reference runner, run scripts in an environment onnxgate builds once per machine
in its cache (about 1.6 GB), named by the versions it holds, and speak to them in files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")
"""The file suffixes taken as a Keras model (``.hdf5`` is the HDF5 format's other name)."""


@dataclass(frozen=True)
class TfToolchain:
    """The releases of TensorFlow's environment."""

    tensorflow: str = "2.21.0"
    tf2onnx: str = "1.17.0"
    keras: str = "3.15.1"

    @property
    def name(self) -> str:
        """The environment's folder name: every pinned version."""
        return f"tensorflow-cpu-{self.tensorflow}+tf2onnx-{self.tf2onnx}+keras-{self.keras}"

    def requirements(self) -> list[str]:
        """The pip requirements."""
        return [
            f"tensorflow-cpu=={self.tensorflow}",
            f"tf2onnx=={self.tf2onnx}",
            f"keras=={self.keras}",
        ]


DEFAULT_TOOLCHAIN = TfToolchain()
"""The newest releases measured to work together here (tensorflow-cpu 2.21.0, tf2onnx 1.17.0,
Keras 3.15.1)."""


PARENT_ENV = "ONNXGATE_PARENT_PID"
"""A TensorFlow process's parent, for its parent-death signal (Linux)."""


def tf_env() -> dict[str, str]:
    """The environment of a process in TensorFlow's environment (the runner's, the export's).

    Without ``PYTHONPATH``: that environment holds no onnxgate, and a path meant for onnxgate's
    Python (another NumPy, a source tree) must not shadow TensorFlow's packages.
    """
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env | {
        "PYTHONNOUSERSITE": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "KERAS_BACKEND": "tensorflow",
        PARENT_ENV: str(os.getpid()),
    }


def tf_python(
    toolchain: TfToolchain = DEFAULT_TOOLCHAIN,
    *,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The interpreter of TensorFlow's environment, built on first use.

    Raises:
        RuntimeEnvError: the environment could not be built (a release that does not exist for
            this Python, or a registry out of reach on the first use).
    """
    from onnxgate.compat.runtime import ensure_tool_env

    return ensure_tool_env(toolchain.name, toolchain.requirements(), progress=progress)
