"""The fuzzing machinery itself: mutators that apply, reproducers that rebuild, judges that judge.

A fuzzer whose mutators throw, whose reproducers build another file, or whose judge waves a
crash through finds nothing and says so quietly; these tests make it say so loudly.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter

import pytest
from _fuzz_harness import Outcome, Worker, escaping_locations, json_documents, problems
from _onnx_edits import build, to_python
from _onnx_mutations import MUTATORS, RandomSource, mutate
from _onnx_values import case_folder


def test_every_mutator_applies_and_rebuilds(corpus, tmp_path):
    """Edits apply cleanly on every model, replay to the same bytes, and print as Python."""
    names = sorted(corpus)
    used: Counter[str] = Counter()
    changed = 0
    for seed in range(400):
        src = RandomSource(seed)
        name = names[seed % len(names)]
        mutated = mutate(corpus[name], src)
        used.update(mutated.mutators)
        changed += mutated.data != corpus[name]
        assert build(corpus[name], mutated.edits) == mutated.data, (name, mutated.edits)
        if seed % 20 == 0:
            source = tmp_path / name
            source.write_bytes(corpus[name])
            out = tmp_path / "rebuilt.onnx"
            exec(to_python(str(source), mutated.edits, str(out)), {})
            assert out.read_bytes() == mutated.data, (name, mutated.edits)
    assert {m.__name__ for _, m in MUTATORS} | {"bytes"} == set(used), used
    assert changed >= 380  # a few edits are no-ops (a field set to the value it had)


def test_edits_survive_a_json_round_trip(corpus):
    name = sorted(corpus)[0]
    for seed in range(50):
        mutated = mutate(corpus[name], RandomSource(seed))
        again = json.loads(json.dumps(mutated.edits))
        assert build(corpus[name], again) == mutated.data


def test_escaping_locations(tmp_path):
    from onnx import TensorProto, helper

    folder = case_folder(tmp_path)
    tensor = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.0] * 4)
    graph = helper.make_graph([], "g", [], [], initializer=[tensor])
    model = helper.make_model(graph)

    def located(location: str) -> list[str]:
        t = model.graph.initializer[0]
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        t.external_data.add(key="location", value=location)
        return escaping_locations(model.SerializeToString(), folder)

    for outside in ("../outside.bin", "/etc/hostname", "link.bin", "sub/../../outside.bin"):
        assert located(outside) == [outside]
    for inside in ("weights.bin", "sub/../weights.bin", "nonexistent.bin", ""):
        assert located(inside) == []
    assert escaping_locations(b"\xff\xff", folder) == []


def test_json_documents():
    assert json_documents('{"a": 1}\n') == 1
    assert json_documents('{"a": 1}\n{"b": 2}\n') == 2
    assert json_documents("") == 0
    assert isinstance(json_documents('{"a": 1}\nwarning: x'), str)


@pytest.mark.parametrize(
    ("outcome", "one_json", "expected"),
    [
        (Outcome(["x"], code=0, stdout="{}"), True, []),
        (Outcome(["x"], code=4, stdout="{}"), True, ["exit 4 (internal error)"]),
        (Outcome(["x"], signal=6), True, ["died by signal 6 (SIGABRT)"]),
        (Outcome(["x"], hang=30.0), True, ["no answer within 30 s (killed)"]),
        (Outcome(["x"], code=1, stdout="{}{}"), True, ["stdout is not one JSON document: 2"]),
        (Outcome(["x"], code=2, stdout="nope"), False, []),
        (
            Outcome(["x"], code=2, stderr="Traceback (most recent call last):"),
            False,
            ["a traceback on stderr"],
        ),
    ],
)
def test_problems(outcome, one_json, expected):
    assert problems(outcome, one_json=one_json) == expected


def test_github_output_is_annotations_only():
    good = Outcome(["check"], code=1, stdout="::error file=m.onnx,title=STR001::x\n")
    assert problems(good, one_json=False, github=True) == []
    smuggled = Outcome(["check"], code=1, stdout=good.stdout + "::add-mask::x\n")
    assert problems(smuggled, one_json=False, github=True) == [
        "a line on stdout that is not one annotation: '::add-mask::x'"
    ]


def test_escaping_data_must_be_refused():
    outcome = Outcome(["inspect"], code=0, stdout="{}")
    assert problems(outcome, one_json=True, must_refuse=True) == [
        "external data outside the model's folder was not refused (exit 0)"
    ]


def test_the_worker_reports_deaths_and_hangs_and_carries_on(corpus, tmp_path):
    """A case that dies by a signal or does not answer is reported, and the next one runs.

    The CLI's test hook makes the onnx checker kill its process with SIGTERM, which the CLI's
    supervisor (which answers for SIGABRT and SIGSEGV) passes on as it must: so this is a real
    death by signal through the real entry point.
    """
    model = tmp_path / "m.onnx"
    model.write_bytes(corpus[sorted(corpus)[0]])
    env = dict(os.environ, ONNXGATE_TEST_CRASH_IN="onnx checker:SIGTERM")
    with Worker(tmp_path / "w", env=env) as worker:
        worker.start()
        died = worker.run(["check", str(model), "--format", "json"], 120)
        assert died.signal == signal.SIGTERM and died.code is None, died
        assert problems(died, one_json=True) == ["died by signal 15 (SIGTERM)"]
        hung = worker.run(["compare", str(model)], 0.01)
        assert hung.hang == 0.01 and problems(hung, one_json=False)
        fine = worker.run(["inspect", str(model), "--format", "json"], 60)
        assert fine.code == 0 and problems(fine, one_json=True) == [], fine
        assert worker.starts == 2


def test_the_worker_runs_cases_the_way_the_console_script_does(corpus, tmp_path):
    """Same exit code and JSON as ``python -m onnxgate`` for a model that fails its check."""
    import subprocess

    model = tmp_path / "m.onnx"
    model.write_bytes(corpus["super_resolution.onnx"])  # no opset_import: check says so, exit 1
    args = ["check", str(model), "--format", "json"]
    with Worker(tmp_path / "w", env=dict(os.environ)) as worker:
        outcome = worker.run(args, 120)
    real = subprocess.run(
        [sys.executable, "-m", "onnxgate", *args], capture_output=True, text=True, check=False
    )
    assert (outcome.code, json.loads(outcome.stdout)) == (real.returncode, json.loads(real.stdout))
    assert outcome.code == 1


def test_an_abort_the_cli_answers_for_is_no_problem(corpus, tmp_path):
    """SIGABRT in a native step is the CLI's to answer (exit 2, one JSON document), not a death."""
    model = tmp_path / "m.onnx"
    model.write_bytes(corpus[sorted(corpus)[0]])
    env = dict(os.environ, ONNXGATE_TEST_CRASH_IN="onnx checker")
    with Worker(tmp_path / "w", env=env) as worker:
        outcome = worker.run(["check", str(model), "--format", "json"], 120)
    assert outcome.code == 2 and outcome.signal is None, outcome
    assert json.loads(outcome.stdout)["error"] == "native-crash"
    assert problems(outcome, one_json=True) == []
