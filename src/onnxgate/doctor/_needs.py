"""What each ONNX Runtime release's CUDA and TensorRT providers need from the machine.

Only what a source says is here; each row names it. The sources:

- [CUDA] ONNX Runtime's CUDA execution provider page, "Requirements"
  (https://onnxruntime.ai/docs/execution-providers/CUDA-ExecutionProvider.html): the CUDA 12.x
  table (1.19.x: CUDA 12.x, cuDNN 9.x, the PyPI default; 1.18.1: 12.x, 9.x; 1.18.0: 12.x, 8.x;
  1.17.x: 12.x, 8.x), the CUDA 11.x table (1.19.x and 1.18.x: 11.8, cuDNN 8.x; 1.15-1.17: 11.8,
  8.2.4; 1.13-1.14: 11.6, 8.2.4; 1.9-1.12: 11.4, 8.2.4; 1.7-1.8: 11.0.3, 8.0.4), and two rules:
  a build for CUDA 12.x works with any 12.x (11.8 with any 11.x), and a build with cuDNN 8.x does
  not work with cuDNN 9.x "and vice versa".
- [TRT] ONNX Runtime's TensorRT execution provider page, "Requirements"
  (https://onnxruntime.ai/docs/execution-providers/TensorRT-ExecutionProvider.html): TensorRT 10.9
  for 1.22, 10.8 for 1.21, 10.4 for 1.20, 10.2 for 1.19, 10.0 for 1.18, 8.6 for 1.15-1.17, 8.5 for
  1.14, 8.4 for 1.12-1.13, 8.2 for 1.11, 8.0 for 1.9-1.10; "Starting with ORT 1.22, only CUDA 12
  GPU packages are released" (1.19-1.21 also list CUDA 11.8).
- [ORT] the onnxruntime 1.32.0 package itself (``onnxruntime/__init__.py``, ``preload_dlls``): it
  loads ``libcudnn.so.9`` and ``libcudart.so.<CUDA major>``, and GPU wheels record the CUDA
  version they were built with in ``capi/build_and_package_info.py`` (``cuda_version``,
  microsoft/onnxruntime#23674). When a build states its CUDA version, that wins over this table.

Releases newer than the last documented row (1.22) are judged by that row and the message says
so: the CUDA and cuDNN majors have not changed since 1.19 as far as the sources go, but a newer
release may need a newer TensorRT minor than 10.9.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from onnxgate.compat.versions import parse_release


@dataclass(frozen=True)
class GpuVariant:
    """One published build of a release: the CUDA and cuDNN majors it was built against."""

    cuda_major: int
    cudnn_major: int

    def __str__(self) -> str:
        return f"CUDA {self.cuda_major}.x with cuDNN {self.cudnn_major}.x"


@dataclass(frozen=True)
class GpuNeeds:
    """What one range of releases needs."""

    first: str
    last: str
    variants: tuple[GpuVariant, ...]
    """The published builds, PyPI's default first."""
    tensorrt: str | None
    """The TensorRT version the TensorRT provider was built with (major.minor)."""
    source: str
    extrapolated: bool = False
    """True when the release is newer than the last documented row, which is used instead."""

    @property
    def tensorrt_major(self) -> int | None:
        """TensorRT's major version (10 for 10.9), which its library's file name carries."""
        return int(self.tensorrt.split(".")[0]) if self.tensorrt else None

    @property
    def label(self) -> str:
        """``1.19``, ``1.18.1`` or ``1.15-1.16``."""
        if self.first == self.last or self.first.startswith(self.last + "."):
            return self.first
        return f"{self.first}-{self.last}"


_C12_9, _C12_8, _C11_8 = GpuVariant(12, 9), GpuVariant(12, 8), GpuVariant(11, 8)

NEEDS: tuple[GpuNeeds, ...] = (
    GpuNeeds("1.22", "1.22", (_C12_9,), "10.9", "[CUDA] 1.19.x row; [TRT] 1.22 row, CUDA 12 only"),
    GpuNeeds("1.21", "1.21", (_C12_9, _C11_8), "10.8", "[CUDA] 1.19.x rows; [TRT] 1.21 row"),
    GpuNeeds("1.20", "1.20", (_C12_9, _C11_8), "10.4", "[CUDA] 1.19.x rows; [TRT] 1.20 row"),
    GpuNeeds("1.19", "1.19", (_C12_9, _C11_8), "10.2", "[CUDA] 1.19.x rows; [TRT] 1.19 row"),
    # 1.18.1's CUDA 12 build moved to cuDNN 9; 1.18.0's had cuDNN 8. PyPI's default was 11.8.
    GpuNeeds("1.18.1", "1.18", (_C11_8, _C12_9), "10.0", "[CUDA] 1.18.1 and 1.18.x rows"),
    GpuNeeds("1.18", "1.18.0", (_C11_8, _C12_8), "10.0", "[CUDA] 1.18.0 and 1.18.x rows"),
    GpuNeeds("1.17", "1.17", (_C11_8, _C12_8), "8.6", "[CUDA] 1.17.x and 1.15-1.17 rows"),
    GpuNeeds("1.15", "1.16", (_C11_8,), "8.6", "[CUDA] 1.15-1.17 row; [TRT] 1.15, 1.16 rows"),
    GpuNeeds("1.14", "1.14", (_C11_8,), "8.5", "[CUDA] 1.13-1.14 row (CUDA 11.6)"),
    GpuNeeds("1.12", "1.13", (_C11_8,), "8.4", "[CUDA] 1.9-1.12, 1.13-1.14 rows (11.4, 11.6)"),
    GpuNeeds("1.9", "1.11", (_C11_8,), "8.0", "[CUDA] 1.9-1.12 row (CUDA 11.4)"),
)
"""Newest first. ``_C11_8`` stands for every CUDA 11 build (11.0.3 to 11.8): the provider needs
CUDA major 11 and cuDNN major 8, which is what the libraries' file names can tell."""


def _line(version: str) -> Version:
    """The release a version belongs to: ``1.20.0rc1``, ``1.20.0.post1`` -> ``1.20.0``.

    A release candidate or a dev build of 1.20.0 is built like 1.20.0, so it needs what 1.20 needs.

    Raises:
        CompatibilityError: ``version`` is not a version number.
    """
    return Version(parse_release(version, what="ONNX Runtime version").base_version)


def _contains(row: GpuNeeds, version: str) -> bool:
    line = _line(version)
    last = parse_release(row.last)
    # a row's last bound names a patch (1.18.0) or a whole minor (1.17: every 1.17.x)
    if len(last.release) == 3:
        return parse_release(row.first) <= line <= last
    return parse_release(row.first) <= line < Version(f"{last.major}.{last.minor + 1}")


def gpu_needs(version: str) -> GpuNeeds | None:
    """What release ``version`` needs, or None for releases older than the table (before 1.9).

    Raises:
        CompatibilityError: ``version`` is not a version number.
    """
    for row in NEEDS:
        if _contains(row, version):
            return row
    newest = NEEDS[0]
    if _line(version) > parse_release(newest.last):
        return GpuNeeds(
            newest.first,
            newest.last,
            newest.variants,
            newest.tensorrt,
            newest.source,
            extrapolated=True,
        )
    return None


def with_build_cuda(needs: GpuNeeds, cuda_version: str | None) -> GpuNeeds:
    """The needs narrowed to the CUDA major the build says it was made with ([ORT] source)."""
    if not cuda_version:
        return needs
    try:
        major = int(cuda_version.split(".")[0])
    except ValueError:
        return needs
    same = tuple(v for v in needs.variants if v.cuda_major == major)
    # A major the table does not list (CUDA 13 builds): cuDNN 9 is what the package loads [ORT].
    variants = same or (GpuVariant(major, 9),)
    return GpuNeeds(
        needs.first, needs.last, variants, needs.tensorrt, needs.source, needs.extrapolated
    )
