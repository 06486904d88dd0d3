"""`inspect`, `check` and `compare` on mutated real models: an answer every time, never a bug.

Each case takes a corpus model, applies a few protobuf-aware edits (opset imports, IR version,
nodes, attributes, initializers, value infos, local functions, any scalar field; raw bytes at a
lower weight: see tools/_onnx_mutations.py), and runs the real command in a persistent worker
process. The answer must be an exit code in {0, 1, 2, 3}: never 4 (onnxgate's own bug), never a
death by signal, never a hang, no traceback, exactly one JSON document on stdout with
``--format json`` (and ``sarif``), and exit 2 whenever external data points outside the model's
folder.

The budget is fixed and the examples are derandomised, so CI runs the same cases every time
(about a minute on 2 cores). A failing case is saved (model, edits, Python reproducer) under
$ONNXGATE_FUZZ_FINDINGS or a temporary folder named in the failure. tools/fuzz_models.py is the
long coverage-guided run.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from _fuzz_harness import Outcome, Worker, escaping_locations, problems, save_finding
from _onnx_mutations import Mutated, mutate, pick
from _onnx_values import case_folder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS

COMPARE_MODELS = (
    "mnist.onnx",
    "image_classifier32.onnx",
    "convcommon_test_model_0.onnx",
    "convcommon_test_model_1.onnx",
    "coreml_onehot_bikesharing.onnx",
    "ext_bert_tokenizer.onnx",
    "super_resolution.onnx",
    "superres_prepost_op18.onnx",
)
"""Models compare runs in well under a second; the others cost seconds in the reference
evaluator (tools/fuzz_models.py runs compare on every model)."""

BUDGET = {"inspect": 160, "check": 150, "compare": 70}
"""Examples per command in the default run, chosen to keep the suite near a minute on 2 cores."""

TIMEOUT = {"inspect": 30.0, "check": 60.0, "compare": 120.0}
"""Seconds without an answer after which a case counts as a hang; about 100 times the slowest
clean case, so that a loaded CI machine does not make one."""

TERMINAL = {
    "inspect": ("stdout", "stderr"),
    "check": ("stdout", "stderr"),
    "compare": ("stdout", "stderr"),
}
"""Streams held to "no control character from the model" in text and github formats: every
console the CLI prints through escapes them (``_rich.Scrub``)."""

FORMATS = {
    "inspect": ("json", "json", "text"),
    "check": ("json", "json", "text", "sarif", "github"),
    "compare": ("json", "json", "text"),
}


class Draws:
    """The mutators' ``Source`` over hypothesis's interactive draws (shrinks towards low ends).

    ``sampled_from`` a range rather than ``integers``: hypothesis draws integers mostly small,
    which would make the first mutator, model and value of every list several times likelier
    than the weights say; a sampled index is close to uniform and shrinks the same way.
    """

    def __init__(self, data: st.DataObject) -> None:
        self._data = data

    def integer(self, low: int, high: int) -> int:
        return self._data.draw(st.sampled_from(range(low, high + 1)))

    def data(self, size: int) -> bytes:
        return self._data.draw(st.binary(max_size=size))


class Fuzz:
    """One command's cases: build, run in the worker, judge, save what fails, count the rest."""

    def __init__(self, corpus: dict[str, bytes], worker: Worker, root: Path, findings: Path):
        self.corpus = corpus
        self.worker = worker
        self.folder = Path(case_folder(root))
        self.findings = findings
        self.codes: Counter[int] = Counter()
        self.failure: Failure | None = None

    def case(self, command: str, data: st.DataObject) -> None:
        src = Draws(data)
        names = sorted(self.corpus)
        if command == "compare":
            names = [n for n in names if n in COMPARE_MODELS]
        name = pick(src, names)
        mutated = mutate(self.corpus[name], src)
        fmt = pick(src, FORMATS[command])
        path = self.folder / "model.onnx"
        path.write_bytes(mutated.data)
        args = [command, str(path), "--format", fmt]
        if command == "compare" and pick(src, (False, False, True)):
            args += ["--against", "ort:disable"]
        outcome = self.worker.run(args, TIMEOUT[command])
        refuse = bool(escaping_locations(mutated.data, self.folder))
        # SARIF is a document only about a verdict: a model that cannot be read (exit 2) is an
        # error on stderr, as in text mode, so CI fails the step rather than upload no results.
        one_json = fmt == "json" or (fmt == "sarif" and outcome.code in (0, 1))
        found = problems(
            outcome,
            one_json=one_json,
            must_refuse=refuse,
            github=fmt == "github",
            terminal=TERMINAL[command] if fmt in ("text", "github") else (),
        )
        if outcome.code is not None:
            self.codes[outcome.code] += 1
        if found:
            self.failure = Failure(name, mutated, outcome, found)
            raise AssertionError(
                f"onnxgate {' '.join(args)} on {name} after {mutated.mutators}: "
                f"{'; '.join(found)}\nedits: {json.dumps(mutated.edits)[:2000]}\n"
                f"stdout: {outcome.stdout[-1500:]}\nstderr: {outcome.stderr[-3000:]}"
            )

    def save(self) -> Path | None:
        """Save the last failing case: after hypothesis's final replay, the minimal one."""
        if self.failure is None:
            return None
        f = self.failure
        return save_finding(
            self.findings,
            source=str(CORPUS / f.model),
            edits=f.mutated.edits,
            data=f.mutated.data,
            outcome=f.outcome,
            found=f.problems,
            mutators=f.mutated.mutators,
        )


@dataclass(frozen=True)
class Failure:
    model: str
    mutated: Mutated
    outcome: Outcome
    problems: list[str]


@pytest.fixture(scope="module")
def fuzz(corpus, worker, findings, tmp_path_factory) -> Fuzz:
    return Fuzz(corpus, worker, tmp_path_factory.mktemp("fuzz-cases"), findings)


def _run(fuzz: Fuzz, command: str, examples: int) -> Counter[int]:
    fuzz.codes.clear()
    fuzz.failure = None

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        report_multiple_bugs=False,  # one bug, shrunk, so its final replay is the last call
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.data())
    def cases(data: st.DataObject) -> None:
        fuzz.case(command, data)

    try:
        cases()
    except BaseException as failed:
        saved = fuzz.save()
        if saved is not None:
            failed.add_note(f"saved in {saved} (reproduce.py rebuilds the model)")
        raise
    print(f"{command}: {examples} cases, exit codes {dict(sorted(fuzz.codes.items()))}")
    return Counter(fuzz.codes)


# Every command must also keep reaching past the loader: were every mutant refused at parsing
# (a broken mutator, a wrong path), the suite would pass while testing nothing.
MIN_RUN = {"inspect": 0.4, "check": 0.25, "compare": 0.15}
"""Least share of cases that must get a verdict (exit 0 or 1) rather than a refusal."""


@pytest.mark.parametrize("command", ["inspect", "check", "compare"])
def test_mutated_corpus_models_get_an_answer(fuzz, command):
    codes = _run(fuzz, command, BUDGET[command])
    assert sum(codes.values()) >= BUDGET[command] * 0.9
    assert codes[0] + codes[1] >= MIN_RUN[command] * sum(codes.values()), codes
    assert codes[2] > 0, codes  # and some mutants must be refused, or nothing was mutated
