"""The values mutations choose from: numbers, names, domains, types and external-data locations.

Each list holds the values that sit on an edge: the boundaries of the integer types, dimensions
no tensor can have, strings that are empty, huge, markup or terminal escapes, domains real and
made up, locations inside, outside and around the model's folder (``case_folder`` makes the
files those refer to).
"""

from __future__ import annotations

import os

INT64 = [
    -1, 0, 1, 2, 3, 7, 255, 2**31 - 1, 2**31, 2**32, 2**40, 2**62, 2**63 - 1, -(2**31), -(2**63),
]  # fmt: skip
INT32 = [-1, 0, 1, 2, 3, 7, 16, 17, 21, 23, 25, 30, 99, 255, 2**31 - 1, -(2**31)]
DIMS = [0, 1, 2, 3, 7, -1, -7, 2**31, 2**40, 2**62, 2**63 - 1, -(2**63)]
"""Dimensions: small ones, and ones far past any real tensor. Mid-sized values (2**14) are left
out on purpose: they are legal, and they make a 2-core machine compute for minutes."""
FLOATS = [float("nan"), float("inf"), float("-inf"), -0.0, 3.4e38, 1e-45, -1.0, 1e300]
STRINGS = [
    "",
    "x",
    "ghost",
    "[bold]x[/]",
    "[/]",
    "[",
    "\x1b[31mred",
    "\x1b]0;title\x1b\\",
    "a\rb",
    "\u202eevil",
    "名前",
    "a\nb",
    "%s{0}",
    "../x",
    " ",
    "\x00",
    "x" * 4096,
    ".",
    "onnx::Conv_1",
]
DOMAINS = [
    "",
    "ai.onnx",
    "ai.onnx.ml",
    "ai.onnx.training",
    "ai.onnx.preview.training",
    "com.microsoft",
    "com.microsoft.experimental",
    "com.microsoft.extensions",
    "ai.onnx.contrib",
    "org.pytorch.aten",
    "no.such.domain",
    "[x]",
]
OPSET_VERSIONS = [
    -(2**63), -1, 0, 1, 6, 7, 9, 11, 13, 17, 21, 22, 23, 24, 25, 26, 99, 2**31, 2**62, 2**63 - 1,
]  # fmt: skip
IR_VERSIONS = [-1, 0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 99, 2**31, 2**63 - 1]
DATA_TYPES = [*range(-1, 27), 99, 2**31 - 1]
LOCATIONS = [
    "../outside.bin",
    "/etc/hostname",
    "link.bin",
    "sub/../../outside.bin",
    "weights.bin",
    "sub/../weights.bin",
    "nonexistent.bin",
    "",
    ".",
    "..",
    "_ORT_MEM_ADDR_",
    "C:\\x.bin",
    "\\\\server\\share\\x.bin",
    "~/x.bin",
    "file:///etc/hostname",
    "%2e%2e/outside.bin",
    "weights.bin\x00../outside.bin",
]
"""External-data locations. The case folder holds ``weights.bin`` (4 KiB) and ``link.bin`` (a
symlink to ``../outside.bin``), and its parent holds ``outside.bin``: see ``case_folder``."""
NUMBERS = ["-1", "0", "1", "abc", "1e3", "99999999999999999999", " 4", "", "4096", "4097"]
TYPES = [
    "tensor_type { elem_type: 1 }",
    "tensor_type { elem_type: 1 shape { } }",
    "tensor_type { elem_type: 99 shape { dim { dim_value: 1 } } }",
    "tensor_type { elem_type: 0 }",
    'tensor_type { elem_type: 8 shape { dim { dim_param: "n" } } }',
    "sequence_type { elem_type { tensor_type { elem_type: 1 } } }",
    "sequence_type { }",
    "map_type { key_type: 7 value_type { tensor_type { elem_type: 1 } } }",
    "optional_type { elem_type { tensor_type { elem_type: 1 } } }",
    "sparse_tensor_type { elem_type: 1 shape { dim { dim_value: 2 } } }",
    "",
]


def case_folder(root: str | os.PathLike[str]) -> str:
    """A folder for cases under ``root``: the side files ``LOCATIONS`` refers to, made once."""
    folder = os.path.join(root, "case")
    os.makedirs(os.path.join(folder, "sub"), exist_ok=True)
    with open(os.path.join(root, "outside.bin"), "wb") as handle:
        handle.write(b"\x01" * 4096)
    with open(os.path.join(folder, "weights.bin"), "wb") as handle:
        handle.write(b"\x00" * 4096)
    link = os.path.join(folder, "link.bin")
    if not os.path.islink(link):
        os.symlink(os.path.join("..", "outside.bin"), link)
    return folder
