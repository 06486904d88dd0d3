"""Calibration and evaluation feeds: files, folders, or a Python function that yields them.

Both sets are checked against the model's signature before anything is quantised, so a wrong
input name or dtype is an input error (exit 2) and not an ONNX Runtime failure halfway through.
The two sets are compared row by row: accuracy measured on rows the quantiser calibrated on
flatters the result, and the report says how many there were.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from onnxgate._pathtext import shown
from onnxgate._words import setting
from onnxgate.data import (
    Sample,
    feed_dims,
    feeds_digest,
    json_array,
    load_feeds,
    read_json,
    read_npy,
    read_npz,
    read_text,
    validate_feeds,
)
from onnxgate.errors import ConfigError, FeedError, first_line
from onnxgate.model import Signature

log = logging.getLogger(__name__)

_ENTRY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def is_entry_point(text: str) -> bool:
    """``package.module:function`` (and not a path that exists)."""
    return bool(_ENTRY.match(text)) and not Path(text).exists()


def _from_entry(entry: str, option: str) -> list[Sample]:
    from onnxgate.runners import load_entry

    where = setting(option, entry)
    function = load_entry(entry)
    try:
        produced = function()
        items = list(produced) if isinstance(produced, Iterable) else None
    except Exception as err:  # the user's function may raise anything
        raise FeedError(f"{where}: the function raised {type(err).__name__}: {err}") from err
    if items is None or isinstance(produced, Mapping):
        raise FeedError(
            f"{where}: returned {type(produced).__name__}; expected an iterable of feeds "
            "({input name: array}) or of onnxgate Samples."
        )
    samples = []
    for index, item in enumerate(items):
        if isinstance(item, Sample):
            samples.append(item)
        elif isinstance(item, Mapping):
            feeds = {str(k): np.asarray(v) for k, v in item.items()}
            samples.append(Sample(f"{entry}[{index}]", feeds))
        else:
            raise FeedError(
                f"{where}: item {index} is a {type(item).__name__}; expected a mapping "
                "of input name to array."
            )
    return samples


def load_samples(source: str, signature: Signature, *, option: str) -> list[Sample]:
    """Samples from a file, a folder or an entry point, each checked against the signature.

    ``option`` is the setting that gave ``source`` (``eval``), named in messages in the words of
    the interface in use.

    Raises:
        FeedError: unreadable data, no samples, or a sample that does not fit the model.
        ConfigError: an entry point that cannot be imported.
    """
    if is_entry_point(source):
        samples = _from_entry(source, option)
    else:
        samples = load_feeds(source, signature=signature)
    if not samples:
        raise FeedError(f"{setting(option, source)}: holds no sample.")
    return [
        Sample(
            s.label,
            validate_feeds(signature, s.feeds, where=f"{setting(option)} {s.label}"),
            s.dims,
        )
        for s in samples
    ]


def rows(sample: Sample) -> int:
    """Rows in a sample: the shared size of every array's axis 0, else 1."""
    sizes = {np.shape(v)[0] for v in sample.feeds.values() if np.ndim(v) > 0}
    return sizes.pop() if len(sizes) == 1 else 1


def row_digests(samples: Sequence[Sample]) -> list[str]:
    """A digest per row (the same row of every input); a whole sample is one row if axes differ."""
    digests = []
    for sample in samples:
        values = {name: np.asarray(v) for name, v in sample.feeds.items()}
        sizes = {v.shape[0] for v in values.values() if v.ndim > 0}
        if len(sizes) == 1 and all(v.ndim > 0 for v in values.values()):
            digests += [
                feeds_digest({name: v[index] for name, v in values.items()})
                for index in range(sizes.pop())
            ]
        else:
            digests.append(feeds_digest(values))
    return digests


def overlap(calibration: Sequence[Sample], evaluation: Sequence[Sample]) -> int:
    """How many evaluation rows also appear in the calibration data."""
    seen = set(row_digests(calibration))
    return sum(d in seen for d in row_digests(evaluation))


def load_labels(path: Path, expected: int) -> np.ndarray:
    """True labels, one per evaluation row, as a 1-D integer array.

    Read by the data reader (``.npy``, ``.npz`` with one array, JSON), or as whitespace-separated
    integers from any other file.

    Raises:
        FeedError: unreadable, not integers, or not one per row.
    """
    where = setting("labels", shown(path))
    if not path.is_file():
        raise FeedError(f"{where}: no such file.")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        values = read_npy(path)
    elif suffix == ".npz":
        arrays = read_npz(path)
        if len(arrays) != 1:
            raise FeedError(f"{where}: holds {len(arrays)} arrays; keep only the labels.")
        (values,) = arrays.values()
    elif suffix == ".json":
        values = json_array(read_json(path), where)
    else:
        values = _text_labels(path, where)
    values = values.reshape(-1)
    if values.dtype.kind not in "iu":
        raise FeedError(f"{where}: holds {values.dtype} values; labels are class indices.")
    if values.size != expected:
        raise FeedError(
            f"{where}: has {values.size} label(s) for {expected} evaluation row(s).",
            hint=f"Give one label per row of the evaluation data ({setting('eval')}), in the "
            "order of its samples.",
        )
    return values.astype(np.int64)


def _text_labels(path: Path, where: str) -> np.ndarray:
    """Whitespace-separated integers."""
    try:
        numbers = [int(token) for token in read_text(path, kind="labels").split()]
    except ValueError as err:  # not an integer, or more digits than Python converts
        raise FeedError(f"{where}: cannot be read as integer labels ({first_line(err)}).") from err
    if any(not -(2**63) <= n < 2**63 for n in numbers):
        raise FeedError(f"{where}: holds integers beyond 64 bits; labels are class indices.")
    return np.asarray(numbers, dtype=np.int64)


def sample_dims(signature: Signature, sample: Sample) -> dict[str, int]:
    """The size each symbolic dimension takes in a sample."""
    return feed_dims(signature, sample.feeds)


def check_distinct(calibration: str | None, evaluation: str | None) -> None:
    """Refuse the same source for both sets: the evaluation would judge what was tuned on it."""
    if calibration is None or evaluation is None:
        return
    same = calibration == evaluation
    if not same and not is_entry_point(calibration) and not is_entry_point(evaluation):
        try:
            same = Path(calibration).resolve() == Path(evaluation).resolve()
        except OSError:
            same = False
    if same:
        raise ConfigError(
            f"{setting('calibration')} and {setting('eval')} are the same data ({evaluation}): "
            "accuracy must be measured on data the quantiser did not see.",
            hint="Split your data into a calibration part and a held-apart evaluation part.",
        )
