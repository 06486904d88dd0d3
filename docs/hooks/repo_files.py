"""MkDocs hook: the benchmark results, kept beside the code that made them, published in the site.

``benchmarks/README.md`` and ``benchmarks/results/*`` live outside ``docs/`` because the scripts
write them there; this hook adds them to the site under ``benchmarks/`` so the docs can link to
them and strict mode checks those links like any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ("benchmarks/README.md", "benchmarks/results/*.md", "benchmarks/results/*.json")


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    """Add the published files of the repository outside ``docs/``."""
    for pattern in PUBLISHED:
        for path in sorted(ROOT.glob(pattern)):
            uri = path.relative_to(ROOT).as_posix()
            if files.get_file_from_path(uri) is None:
                # built and linkable without a nav entry: a result page a script adds later
                # must not fail the strict build for being missing from the nav
                files.append(
                    File.generated(
                        config, uri, abs_src_path=str(path), inclusion=InclusionLevel.NOT_IN_NAV
                    )
                )
    return files
