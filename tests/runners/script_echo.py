"""A script ``run_script`` runs in tests: it answers with what it was given and where it ran.

Like the placement audit, it needs only the standard library and NumPy, so an isolated
environment runs it by path (``python script_echo.py request.json answer.json``).
"""

from __future__ import annotations

import json
import sys

import numpy as np


def echo(request: dict, arrays: dict | None) -> dict:
    """The request, the arrays as lists, and the interpreter that ran it."""
    shown = {name: np.asarray(value).tolist() for name, value in (arrays or {}).items()}
    return {"request": request, "arrays": shown, "python": sys.executable}


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as file:
        given = json.load(file)
    feeds = None
    if given.get("feeds"):
        with np.load(given.pop("feeds"), allow_pickle=False) as archive:
            feeds = {name: archive[name] for name in archive.files}
    with open(sys.argv[2], "w", encoding="utf-8") as file:
        json.dump(echo(given, feeds), file)
