"""``onnxgate doctor [--providers LIST]``: is this machine ready for ONNX Runtime?"""

from __future__ import annotations

from typing import Annotated

import typer

from onnxgate.cli._common import Format, handles_errors, run
from onnxgate.cli._options import SESSION, FormatOpt, OpsLibraryOpt
from onnxgate.doctor import doctor, render_text
from onnxgate.errors import ExitCode


@handles_errors
def doctor_command(
    providers: Annotated[
        list[str] | None,
        typer.Option(
            "--providers",
            "-p",
            help="Providers that must work here, comma-separated or repeated (cuda, tensorrt, "
            "CUDAExecutionProvider), each with options as NAME:KEY=VALUE[,KEY=VALUE...] "
            "(openvino:precision=FP32): the probe runs with them. CPU is always checked. Exit 3 "
            "if one does not work.",
            show_default=False,
            rich_help_panel=SESSION,
        ),
    ] = None,
    runtime: Annotated[
        str,
        typer.Option(
            "--runtime",
            "-r",
            help="Ask another ONNX Runtime release or package, such as "
            "onnxruntime-openvino==1.24.1, in its isolated environment (created once in the user "
            "cache), instead of the installed one.",
        ),
    ] = "installed",
    ops_library: OpsLibraryOpt = None,
    fmt: FormatOpt = Format.text,
) -> None:
    """Is this machine ready to run ONNX Runtime the way you want? Each problem comes with its fix.

    What it checks:

    * **ONNX Runtime**: version, build, and which distribution the imported module came from.
    * **Providers**: those compiled in, and whether each actually works: a one-node session per
      provider, in a child process, with CPU fallback disabled (a provider that would silently
      run on CPU counts as not working; the error ONNX Runtime logged is shown).
    * **Packages**: onnxruntime and onnxruntime-gpu (or another flavour) installed side by side,
      overwriting each other: a classic cause of silent CPU fallback.
    * **GPU libraries**: NVIDIA driver, CUDA runtime, cuBLAS, cuDNN and TensorRT found on disk
      (LD_LIBRARY_PATH, the loader cache, CUDA_HOME, nvidia-* wheels) against the majors this
      ONNX Runtime release needs (ONNX Runtime's published requirements).
    * **CPU**: logical CPUs vs affinity vs the cgroup quota, thread variables (OMP_NUM_THREADS,
      MKL_NUM_THREADS, OPENBLAS_NUM_THREADS, ORT_*_NUM_THREADS), instruction sets (AVX2, AVX-512,
      VNNI, AMX; NEON, SVE, i8mm on Arm), and NumPy's BLAS.
    * **Custom operator libraries** (`--ops-library`): each one's name, version and sha256, and
      whether it loads in this ONNX Runtime (registered in a one-node session, in a child
      process; ONNX Runtime's words when it does not, exit 3).

    Examples: `onnxgate doctor` · `onnxgate doctor --providers cuda,tensorrt --format json` ·
    `onnxgate doctor --runtime onnxruntime-openvino==1.24.1 --providers openvino:precision=FP32`

    Exit codes: 0 every wanted provider works (warnings may be printed); 2 an unknown provider
    name; 3 a wanted provider (or ONNX Runtime itself) does not work here.
    """
    run(
        fmt,
        lambda _: doctor(providers, runtime=runtime, ops_libraries=tuple(ops_library or ())),
        render_text,
        progress="none",
        failed=ExitCode.ENVIRONMENT,
    )
