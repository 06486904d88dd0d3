"""Config fields in this CLI's words: the flag that sets each one.

Library messages name config fields (``feeds.dims``, ``session.threads``); ``FLAGS`` is the one
table that turns them into this CLI's flags (``--dim``, ``--threads``). ``cli_words`` and
``cli_offers`` are the words every command speaks (``onnxgate._words.speaking``, entered by
``_common.handles_errors``), ``translated`` renames the fields of an error. It imports nothing of
the CLI, so ``_common`` and ``_options`` both take it from here.
"""

from __future__ import annotations

from collections.abc import Mapping

from onnxgate._pathtext import shown
from onnxgate._words import library_words, renamed
from onnxgate.errors import ConfigError

FLAGS: dict[str, str] = {
    # session
    "session.providers": "--providers",
    "session.provider_options": "--provider-option",
    "session.opt_level": "--opt-level",
    "session.threads": "--threads",
    "session.inter_op_threads": "--inter-op-threads",
    "session.parallel": "--parallel",
    "session.cpu_mem_arena": "--no-arena",
    "session.session_config": "--session-config",
    # feeds
    "feeds.inputs": "--inputs",
    "feeds.dims": "--dim",
    "feeds.ranges": "--range",
    "feeds.seed": "--seed",
    # tolerances
    "tolerances.atol": "--atol",
    "tolerances.rtol": "--rtol",
    "tolerances.per_output": "--tol",
    "tolerances.metrics": "--metric",
    # the steps' own settings
    "against": "--against",
    "allow_ops": "--allow-op",
    "allow_weak_rules": "--allow-weak-rules",
    "batch": "--batch",
    "batches": "--batch",
    "budget": "--budget",
    "candidate": "--candidate",
    "contest_seconds": "--contest-seconds",
    "contract": "--no-contract",
    "data": "--data",
    "dtype": "--dtype",
    "dynamic": "--dynamic",
    "example_inputs": "--example-inputs",
    "exporter": "--exporter",
    "fail_on": "--fail-on",
    "force": "--force",
    "ignore": "--ignore",
    "localize": "--localize",
    "method": "--method",
    "min_gain": "--min-gain",
    "objective": "--objective",
    "opset": "--opset",
    "out": "--out",
    "output_names": "--output-name",
    "providers": "--providers",
    "reference": "--reference",
    "require": "--require",
    "runs": "--runs",
    "runtime": "--runtime",
    "runtimes": "--runtime",
    "save_optimized": "--save-optimized",
    "second_opinion": "--no-second-opinion",
    "seed": "--seed",
    "threads": "--threads",
    "time_budget": "--budget",
    "timeout": "--timeout",
    "top": "--top",
    "trace": "--trace",
    "trust_pickle": "--trust-pickle",
    "tuned": "--tuned",
    "vs": "--vs",
    "warmup": "--warmup",
    "write": "--no-write",
    # quantize
    "activation_type": "--activation-type",
    "allow_slower": "--allow-slower",
    "bench": "--no-bench",
    "bench_batches": "--bench-batch",
    "bench_inputs": "--bench-inputs",
    "bench_budget_s": "--bench-budget",
    "calibration": "--calibration",
    "calibration_method": "--calibration-method",
    "eval": "--eval",
    "format": "--quant-format",
    "gate_metric": "--gate-metric",
    "labels": "--labels",
    "max_drop": "--max-drop",
    "max_excluded": "--max-excluded",
    "metrics": "--metric",
    "mode": "--mode",
    "op_types": "--op-types",
    "outputs": "--output",
    "per_channel": "--per-channel",
    "preset": "--preset",
    "reduce_range": "--reduce-range",
    "search": "--search",
    "weight_type": "--weight-type",
}
"""The flag of each config field, by its path in the step's config. A path not listed falls back
to its tail (``session.threads`` → ``threads``), so a part built alone is named the same way."""


def flag_for(path: str) -> str | None:
    """The flag of a config field path, or None when this CLI has none."""
    parts = path.split(".")
    for start in range(len(parts)):
        tail = ".".join(parts[start:])
        if tail in FLAGS:
            return FLAGS[tail]
        for prefix in ("session.", "feeds.", "tolerances."):
            if prefix + tail in FLAGS:
                return FLAGS[prefix + tail]
    return None


OFF_FLAGS: dict[str, str] = {
    "per_channel": "--per-tensor",
    "reduce_range": "--full-range",
}
"""The flag that turns a setting off where it is not ``--no-`` and the on flag's name."""


def cli_words(path: str, value: object = None) -> str:
    """A setting as this CLI's flag (``--dim x[2]=SIZE``, ``--reference ort:disable``).

    The words commands speak (``onnxgate._words.speaking``); a setting without a flag is named by
    its config field. A switch is named by the flag that sets it to ``value``: ``--allow-slower``
    for True, ``--no-bench`` or ``--per-tensor`` for False; a list by the flag once per item;
    per-output tolerances (``{"probabilities": (0.05, 0)}``) as ``--tol probabilities:0.05,0``.
    """
    flag = flag_for(path)
    if flag is None:
        return library_words(path, value)
    if path == "feeds.dims" and isinstance(value, list | tuple):
        return " ".join(f"{flag} {name}=SIZE" for name in value)
    if path == "feeds.inputs":
        return f"{flag} {'FILE' if value is None else shown(str(value))}"
    if path.endswith("tolerances.per_output") and isinstance(value, Mapping):
        return " ".join(f"{flag} {name}:{atol:g},{rtol:g}" for name, (atol, rtol) in value.items())
    if isinstance(value, bool):
        if flag.startswith("--no-"):
            return flag if not value else f"no {flag}"
        if value:
            return flag
        return OFF_FLAGS.get(path.rsplit(".", 1)[-1], "--no-" + flag.removeprefix("--"))
    if value is None:
        return flag
    if isinstance(value, list | tuple):
        return " ".join(f"{flag} {item}" for item in value)
    return f"{flag} {value}"


def cli_offers(path: str) -> bool:
    """Whether a command has a flag for a setting (the settings ``cli_words`` names by flag)."""
    return flag_for(path) is not None


def translated(error: ConfigError) -> ConfigError:
    """The error with the config fields it names shown as this CLI's flags (see ``renamed``)."""
    return renamed(error, flag_for)
