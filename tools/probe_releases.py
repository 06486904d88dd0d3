"""Measure the IR and opset limits of ONNX Runtime releases and write compat/data/ort_limits.json.

Each release is installed in its own isolated environment (onnxgate's environment manager) and
asked to load one-node models of increasing IR and opset. The result ships with onnxgate so that
`inspect` can name the oldest release that loads a model without probing anything.

    python tools/probe_releases.py 1.15.1 1.16.3 ... 1.31.1
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from onnxgate._fs import atomic_write_text
from onnxgate.compat.runtime import RuntimeSpec, runtime_profile
from onnxgate.compat.versions import limits_to_dict, release_key

OUT = Path(__file__).resolve().parents[1] / "src/onnxgate/compat/data/ort_limits.json"


def main(releases: list[str]) -> None:
    existing = json.loads(OUT.read_text())["releases"] if OUT.exists() else []
    rows = {row["release"]: row for row in existing}
    for release in releases:
        try:
            profile = runtime_profile(RuntimeSpec("onnxruntime", release), progress=print)
        except Exception as err:  # keep going: one release that fails to install is a finding
            print(f"{release}: {err}", file=sys.stderr)
            continue
        row = limits_to_dict(profile.limits())
        row["python"] = profile.python
        row["probed_at"] = profile.probed_at
        rows[release] = row
        print(release, row["max_ir"], row["max_opsets"], flush=True)
    ordered = sorted(rows.values(), key=lambda r: release_key(r["release"]))
    note = "Measured by tools/probe_releases.py: one-node models loaded in each release."
    atomic_write_text(OUT, json.dumps({"note": note, "releases": ordered}, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
