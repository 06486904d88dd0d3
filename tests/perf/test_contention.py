"""Benchmarks that doubt themselves: a busy machine marks the figures unreliable (issue 16).

The demo once printed PyTorch at 17.5x slower than ONNX Runtime under CPU contention (1.12x on a
rerun), and no warning fired: a contender slowed steadily for the whole run has a low spread.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from models import mlp, save
from onnxgate.cli import app
from onnxgate.perf import BenchConfig, bench
from onnxgate.perf._contention import OTHERS_MAX, Watch, drift, judge

BURN = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end: pass\n"


def test_an_idle_measurement_has_no_reasons():
    conditions = judge(2, 3.0, others=0.02, steal=0.0, baseline_ms=(2.0, 2.1), drifts={"a": 1.05})
    assert conditions.reliable and conditions.reasons == []


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"others": 0.6}, "other processes took 60% of the 2 CPU(s) while it was timed"),
        ({"steal": 0.2}, "the hypervisor stole 20% of the CPU time"),
        ({"baseline_ms": (2.0, 3.0)}, "a fixed workload took 2.00 ms before and 3.00 ms after"),
        ({"drifts": {"torch": 1.8}}, "torch ran 1.80x slower at the end than at the start"),
        ({"drifts": {"ort": 0.5}}, "ort ran 2.00x faster at the end than at the start"),
    ],
)
def test_each_sign_of_contention_is_a_reason(change, reason):
    args = {"others": 0.0, "steal": 0.0, "baseline_ms": (2.0, 2.0), "drifts": {}} | change
    conditions = judge(2, 3.0, **args)
    assert not conditions.reliable
    assert any(r.startswith(reason) for r in conditions.reasons), conditions.reasons


def test_drift_compares_the_last_third_of_runs_with_the_first():
    assert drift([1.0] * 6 + [2.0] * 6) == pytest.approx(2.0)
    assert drift([1.0, 1.1, 0.9] * 4) == pytest.approx(1.0, abs=0.06)  # noise, not a trend
    assert drift([1.0] * 8) is None  # too few runs to say


def test_the_counters_are_read_from_the_kernels_files(tmp_path):
    # a fake /proc: two CPUs, this process only watching cpu0
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)

    def write(cpu0: list[int], cpu1: list[int], ours: int) -> None:
        rows = [f"cpu {' '.join(['0'] * 10)}", "cpu0 " + " ".join(map(str, cpu0)), "cpu1 "]
        rows[2] += " ".join(map(str, cpu1))
        (proc / "stat").write_text("\n".join(rows) + "\nintr 0\n")
        fields = ["S"] + ["0"] * 10 + [str(ours), "0"] + ["0"] * 30
        (proc / "42" / "stat").write_text("42 (python worker) " + " ".join(fields))

    write([0] * 10, [0] * 10, 0)
    watch = Watch(lambda: [42], proc=proc, cpus={0})
    # 100 ticks pass on cpu0: 70 busy (30 of them ours), 20 idle, 10 stolen; cpu1 is not ours
    write([50, 0, 20, 20, 0, 0, 0, 10, 0, 0], [100, 0, 0, 0, 0, 0, 0, 0, 0, 0], 30)
    conditions = watch.conditions()
    assert conditions.others == pytest.approx(0.4)
    assert conditions.steal == pytest.approx(0.1)
    assert not conditions.reliable and len(conditions.reasons) >= 2


@pytest.fixture
def burners():
    """Two processes spinning on the CPUs for the length of a test: another user's job."""
    procs = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(2)]
    yield
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_benchmark_beside_a_busy_process_is_marked_unreliable(tmp_path, burners):
    path = save(mlp(), tmp_path / "mlp.onnx")
    report = bench(path, BenchConfig(budget=1.0, warmup=2))
    assert report.conditions is not None and not report.reliable
    assert report.conditions.others > OTHERS_MAX
    assert any(w.startswith("UNRELIABLE: other processes took") for w in report.warnings)


def test_a_ratio_taken_on_a_busy_machine_is_not_printed_as_fact(tmp_path, burners):
    # the demo's case: two sides in worker processes, interleaved, the machine busy throughout
    path = save(mlp(), tmp_path / "mlp.onnx")
    other = save(mlp(), tmp_path / "other.onnx")
    args = ["bench", str(path), "--vs", str(other), "--budget", "1", "--warmup", "2"]
    result = CliRunner().invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["ratio"] and document["conditions"]["others"] > OTHERS_MAX
    assert document["conditions"]["reasons"]
    text = CliRunner().invoke(app, args).stdout
    assert "UNRELIABLE" in text and "measure the machine, not the model" in " ".join(text.split())
