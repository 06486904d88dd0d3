"""One record per gate step: everything the pipeline, the report and the page need to know of it.

A step is the gate table of ``gate.toml`` a user writes (``BenchStep``), the library config the
step builds from it (``BenchConfig``), the steps it needs, the files it writes, the function that
runs it and the function that draws its report. ``_records.RECORDS`` lists one ``StepRecord`` per
step in the order they run; the pipeline's order, dependencies and runners and the page's
renderers are read from there, never typed again.

Why the gate table is not generated from the library config: each of its keys reads in the
gate's words (defaults taken from ``[targets]``, ``[feeds]`` or the contract's golden samples),
lists are ``list`` where the library takes tuples (a TOML value of the wrong kind is refused as
``Input should be a valid list``), and some defaults differ on purpose (``CompareStep.localize``,
``BenchStep.tuned``). What the record does declare once is how one becomes the other:
``library_config`` (which a runner calls with its table) copies every key of the same name, less the keys only the gate judges
(``gate_only``: thresholds, the verdict's options), renaming the few whose names differ
(``renamed``); the pipeline supplies the library fields the table has not (``owned``) and the
values it resolves (a default from ``[targets]``). ``tests/gate/test_records.py`` holds the two
models to that declaration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

if TYPE_CHECKING:
    from onnxgate.gate._config import Step

Config = TypeVar("Config", bound=BaseModel)


@dataclass(frozen=True)
class StepRecord:
    """A gate step, declared once."""

    name: str
    """The step's name: its table (``[steps.NAME]``), its result and its section of the page."""
    table: type[Step]
    """The ``[steps.NAME]`` table of ``gate.toml``."""
    config: type[BaseModel]
    """The library config the step builds from its table (for export: the ``.onnx`` source's)."""
    run: Callable[..., Any]
    """``run(ctx, table) -> Outcome``: calls the library and judges its report."""
    detail: Callable[..., str]
    """``detail(report, figures) -> html``: the step's report on ``report.html``."""
    needs: tuple[str, ...] = ()
    """Steps whose artefacts this one reads: it runs only when they passed."""
    produces: Callable[[Path, str], Iterable[Path]] = lambda run_dir, name: ()
    """``produces(run_dir, model_name)``: the files this step may write (those it did are its
    artefacts). Evaluated after the step ran, so a glob sees what it wrote."""
    owned: tuple[str, ...] = ()
    """Library fields the pipeline supplies: not in the table (``CheckConfig.runtime``, one
    per target)."""
    gate_only: tuple[str, ...] = ()
    """Table keys the library config has not: the gate's thresholds and verdict options."""
    renamed: Mapping[str, str] = field(default_factory=dict)
    """Table keys whose library field has another name (``bench_budget`` → ``bench_budget_s``)."""

    def library_config(
        self, step: Step, config: type[Config] | None = None, /, **supplied: Any
    ) -> Config:
        """The library config of ``step``: its keys by name, then what the pipeline supplies.

        Args:
            step: the step's table as validated.
            config: another library config than the record's (export of a torch or sklearn
                source); only the keys it has are copied.
            supplied: the fields the pipeline owns, and table keys it resolved (a default from
                ``[targets]``), which replace the table's value.
        """
        target = config or self.config
        fields = target.model_fields
        values: dict[str, Any] = {}
        for key in type(step).model_fields:
            if key == "enabled" or key in self.gate_only:
                continue
            name = self.renamed.get(key, key)
            if config is not None and name not in fields:
                continue
            values[name] = getattr(step, key)
        return target(**(values | supplied))  # type: ignore[return-value]


_BY_TABLE: dict[type[BaseModel], StepRecord] = {}


def register(*records: StepRecord) -> None:
    """Make ``library_config`` know the records' tables (``_records`` registers every step)."""
    _BY_TABLE.update({record.table: record for record in records})


def library_config(step: Step, config: type[Config] | None = None, /, **supplied: Any) -> Config:
    """The library config of a step's table, as its record declares (``StepRecord``)."""
    return _BY_TABLE[type(step)].library_config(step, config, **supplied)
