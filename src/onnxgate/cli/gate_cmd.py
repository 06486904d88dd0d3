"""``onnxgate gate CONFIG.toml`` and ``onnxgate gate init MODEL``."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from typer.core import TyperGroup

from onnxgate.cli._common import emit_json, err, handles_errors, out, run, show

if TYPE_CHECKING:
    from onnxgate.gate import GateReport


class _RunByDefault(TyperGroup):
    """``gate CONFIG`` runs a config; ``gate init MODEL`` is the one subcommand besides it."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


gate_app = typer.Typer(
    cls=_RunByDefault,
    help=(
        "The main job: run every step of a gate.toml (export, check, compare, verify, "
        "placement, tune, quantize, bench, mobile, web), write one report, and register the version when "
        "all passed.\n\n"
        "`onnxgate gate gate.toml` runs a config; `onnxgate gate init MODEL` writes one.\n\n"
        "Exit codes: 0 every step passed (a bench left inconclusive by a busy machine counts as "
        'passed under `[steps.bench] on_unreliable = "warn"`, the default, and is marked so) · '
        "1 a step failed or could not run (the report names it) · 2 the config is invalid · 3 a step could not run for a missing extra, provider or "
        "runtime (and none failed), or the registry cannot be reached."
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)


class GateFormat(StrEnum):
    """Output formats of ``gate``."""

    text = "text"
    json = "json"
    github = "github"


@gate_app.command("run")
@handles_errors
def run_command(
    config: Annotated[
        Path, typer.Argument(help="The gate.toml to run.", show_default=False, metavar="CONFIG")
    ],
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="The run folder (created, must be empty); default: [output] dir/NAME-TIMESTAMP.",
            show_default=False,
        ),
    ] = None,
    registry: Annotated[
        str | None,
        typer.Option(
            "--registry",
            help="Registry URL (sqlite:///path.db, postgresql+psycopg://user@host/db); replaces "
            "[register] registry and $ONNXGATE_REGISTRY.",
            show_default=False,
        ),
    ] = None,
    no_register: Annotated[
        bool, typer.Option("--no-register", help="Do not register, even when every step passed.")
    ] = False,
    no_cache: Annotated[
        bool,
        typer.Option("--no-cache", help="Run every step, even those whose inputs are unchanged."),
    ] = False,
    junit: Annotated[
        Path | None,
        typer.Option(
            "--junit",
            help="Also copy the JUnit XML here (for CI test reports).",
            show_default=False,
        ),
    ] = None,
    fmt: Annotated[
        GateFormat,
        typer.Option(
            "--format",
            "-f",
            help="text; json (the report.json document); github (workflow annotations).",
        ),
    ] = GateFormat.text,
) -> None:
    """Run every step of CONFIG; exit 0 when all passed, 1 when one failed.

    Writes a run folder with the model(s), contract, golden samples, report.json, report.html and
    junit.xml; registers the version when every step passed and the config has [register].

    Examples:
        onnxgate gate gate.toml

        onnxgate gate gate.toml --format github --junit junit.xml   # in CI

        onnxgate gate gate.toml --registry postgresql+psycopg://ci@db/models

    Exit codes: 0 every step passed (an inconclusive bench counts as passed under [steps.bench]
    on_unreliable = "warn", the default, and is marked so in the report) · 1 a step failed or
    could not run (the report names it) · 2 the config is invalid or the run folder not empty · 3 a step could not run for a missing
    extra, provider or runtime (and none failed), or the registry cannot be reached.
    """
    from onnxgate.gate import exit_code, render_github, render_step, render_text, run_gate

    def call(progress: Callable[[str], None]) -> GateReport:
        report = run_gate(
            config,
            out=out_dir,
            registry=registry,
            register=not no_register,
            cache=not no_cache,
            progress=progress,
            on_step=(lambda result: show(render_step(result))) if fmt == "text" else None,
        )
        if junit is not None:
            junit.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(report.run_dir) / "junit.xml", junit)
        if fmt == "text":  # once per run, not between the step lines (also in report.html)
            for note in report.notes:
                err.print(f"[dim]{escape(note)}[/]", markup=True)
        return report

    def github(report: GateReport) -> None:
        print(render_github(report, str(config)), end="")

    run(fmt, call, render_text, formats={"github": github}, failed=exit_code)


@gate_app.command("init")
@handles_errors
def init_command(
    model: Annotated[
        str,
        typer.Argument(
            help="An .onnx file, torch:package.module:factory or sklearn:estimator.joblib.",
            show_default=False,
        ),
    ],
    runtime: Annotated[
        list[str] | None,
        typer.Option(
            "--runtime",
            "-r",
            help="Another runtime the model must run on, repeatable (onnxruntime==1.20.1); "
            "the installed one is always a target.",
            show_default=False,
        ),
    ] = None,
    inputs: Annotated[
        Path | None,
        typer.Option(
            "--inputs",
            help="Real inputs for every step (.npz, JSON, test_data_set folder), written as "
            "[feeds] inputs, relative to the config.",
            show_default=False,
        ),
    ] = None,
    dim: Annotated[
        list[str] | None,
        typer.Option(
            "--dim",
            help="The sizes you serve for a free dimension, repeatable: NAME=MIN,MAX or "
            "NAME=SIZE (INPUT[AXIS]=... for one without a name), written as [feeds] dims.",
            show_default=False,
        ),
    ] = None,
    value_range: Annotated[
        list[str] | None,
        typer.Option(
            "--range",
            help="Values of an input's synthetic feeds, repeatable: INPUT=LOW:HIGH or "
            "INPUT=VALUE, written as [feeds] ranges.",
            show_default=False,
        ),
    ] = None,
    probe: Annotated[
        bool,
        typer.Option(
            "--probe/--no-probe",
            help="Run an .onnx model once (ONNX Runtime, and the reference evaluator on the "
            "smallest sample within 30 s) and set what it finds.",
        ),
    ] = True,
    out_file: Annotated[
        Path, typer.Option("--out", "-o", help="Where to write the config.")
    ] = Path("gate.toml"),
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> None:
    """Write a starter gate.toml for MODEL with every step, commented.

    For an .onnx file it first runs the model once on the feeds the steps will use, with ONNX
    Runtime and with the reference evaluator (on the smallest sample, within 30 s), and sets what
    that probe found, each with a comment saying why: [feeds] left to fill when ONNX Runtime cannot
    run the synthesized feeds; golden outputs and comparisons from ONNX Runtime without graph
    optimisations when the reference evaluator cannot run the model. The file's header says what
    was probed: a model that passed the probe passes the steps as written, unless its outputs
    disagree between the two or miss a threshold you set. torch and sklearn sources are not
    probed (the gate exports them).

    The registry's name is the file's stem; a generic one (model.onnx, model_quantized.onnx,
    inference.onnx, net.onnx) takes the name of the nearest folder that is not itself generic
    (magika/models/standard_v3_3/model.onnx is standard_v3_3; minilm/onnx/model_quantized.onnx is
    minilm_quantized); a torch entry point is named after its module.

    Examples:
        onnxgate gate init model.onnx --runtime onnxruntime==1.20.1 --out gate.toml

        onnxgate gate init ocr.onnx --inputs samples.npz --dim width=16,512 --dim batch=1,32

    Exit codes: 0 written (what the probe found is on stderr) · 2 the model is not a model, a
    --dim is malformed or names nothing in the model, or the file exists (use --force).
    """
    from onnxgate.cli._options import build_starter_dims
    from onnxgate.data import parse_ranges
    from onnxgate.gate import write_starter

    notes: list[str] = []
    parse_ranges(value_range)  # refuses a malformed item with the syntax in the message
    ranges = {k.strip(): v.strip() for k, _, v in (i.partition("=") for i in value_range or ())}
    path = write_starter(
        model,
        out_file,
        runtime or (),
        force=force,
        inputs=inputs,
        dims=build_starter_dims(dim),
        ranges=ranges,
        probe=probe,
        on_note=notes.append,
    )
    if fmt == "json":
        emit_json({"config": str(path), "notes": notes})
    else:
        for note in notes:
            err.print(f"[yellow]note:[/] {escape(note)}", markup=True)
        out.print(f"wrote {escape(str(path))}; run it with: onnxgate gate {escape(str(path))}")
