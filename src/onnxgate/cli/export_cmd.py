"""``onnxgate export torch ENTRY``, ``export sklearn MODEL.joblib``, ``export tf``/``export keras``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from onnxgate.cli._common import (
    FORMAT_HELP,
    Format,
    emit_json,
    err,
    finish,
    handles_errors,
    out,
    progress_line,
)
from onnxgate.cli._flags import flag_option
from onnxgate.cli._options import (
    AtolOpt,
    MetricOpt,
    OpsLibraryOpt,
    RtolOpt,
    TolOpt,
    build,
    tolerance_settings,
)
from onnxgate.compare import CompareReport
from onnxgate.contract import Contract, contract_paths
from onnxgate.export import ExportReport, TfCandidate
from onnxgate.runners import TfToolchain

export_app = typer.Typer(
    name="export",
    help="Export a PyTorch module, a scikit-learn estimator, a TensorFlow SavedModel or a Keras "
    "model to ONNX, prove it, write its contract.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

RuntimeOpt = Annotated[
    str | None,
    typer.Option(
        "--runtime",
        "-r",
        help="Target ONNX Runtime release (onnxruntime==1.16.3): export at the highest opset and "
        "IR it loads (measured, see `onnxgate runtimes`).",
        show_default=False,
    ),
]


def _render(
    path: Path,
    opset: int,
    parity: CompareReport,
    contract: Contract | None,
    notices: list[str],
    candidates: list[TfCandidate] | None = None,
) -> None:
    out.print(f"[bold]{escape(str(path))}[/]: opset {opset}")
    for notice in notices:
        out.print(f"  [yellow]notice:[/] {escape(notice)}")
    for c in candidates or []:
        mark = "[green]chosen[/]" if c.chosen else "      "
        figures = (
            f"max_abs {c.max_abs:.3g}, {c.nodes} nodes, converted in {c.seconds:.1f} s"
            if c.error is None
            else f"[red]failed[/]: {escape(c.error)}"
        )
        out.print(f"  {mark} {escape(c.path)} ({escape(c.exporter)}): {figures}")
    shapes = ", ".join(escape(s.label) for s in parity.samples)
    out.print(
        f"  parity with {escape(parity.reference)} on {len(parity.samples)} sample(s): {shapes}"
    )
    for o in parity.outputs:
        out.print(
            f"    [green]ok[/] {escape(o.name)}: max_abs {o.max_abs:.3g}, mismatches "
            f"{o.mismatches}/{o.elements} ({escape(o.criterion)})"
            if o.max_abs is not None
            else f"    [green]ok[/] {escape(o.name)}"
        )
    if contract is not None:
        contract_path, golden_path = contract_paths(path)
        out.print(f"  wrote {escape(str(contract_path))} and {escape(golden_path.name)}")
    out.print("[bold green]PASS[/]  exported and proved")


def _show(report: ExportReport, fmt: Format) -> None:
    """The report on stdout (JSON) or as text; a miss as the diagnosis on stderr, exit 1."""
    if fmt == Format.json:
        document = report.model_dump(mode="json", exclude={"contract"})
        document["contract"] = str(contract_paths(report.path)[0]) if report.contract else None
        emit_json(document)
    elif report.passed:
        _render(
            report.path,
            report.opset,
            report.parity,
            report.contract,
            # export tf's first notice says which path was chosen: the candidate lines show it
            report.notices[1:] if report.candidates else report.notices,
            report.candidates,
        )
    else:
        err.print(f"[bold red]error:[/] {escape(report.reason or 'parity missed')}")
        if report.hint:
            err.print(f"[dim]hint:[/] {escape(report.hint)}")
    finish(report.passed)


@export_app.command("torch")
@handles_errors
def torch_command(
    entry: Annotated[
        str,
        typer.Argument(
            help="package.module:factory returning the module in eval mode, or (module, example_inputs).",
            show_default=False,
        ),
    ],
    out_path: Annotated[Path, flag_option("out", "--out", "-o", help="The .onnx file to write.")],
    example_inputs: Annotated[
        Path | None,
        flag_option(
            "example_inputs",
            "--example-inputs",
            help="An .npz of example inputs, named as forward's parameters, in order.",
            show_default=False,
        ),
    ] = None,
    dynamic: Annotated[
        list[str] | None,
        flag_option(
            "dynamic",
            "--dynamic",
            help="A dynamic axis, INPUT:AXIS=LABEL (repeatable): --dynamic input_ids:0=batch "
            "--dynamic input_ids:1=seq. Axes with one label share a size.",
            show_default=False,
        ),
    ] = None,
    output_name: Annotated[
        list[str] | None,
        flag_option(
            "output_names",
            "--output-name",
            help="Names of the outputs, in order (repeatable).",
            show_default=False,
        ),
    ] = None,
    opset: Annotated[
        int | None,
        flag_option("opset", "--opset", help="ai.onnx opset to export at.", show_default=False),
    ] = None,
    runtime: RuntimeOpt = None,
    exporter: Annotated[
        str,
        flag_option(
            "exporter",
            "--exporter",
            help="dynamo (torch.export based, the default), torchscript (tracing), or auto (dynamo, "
            "then TorchScript with a printed notice).",
        ),
    ] = "dynamo",
    atol: AtolOpt = None,
    rtol: RtolOpt = None,
    tol: TolOpt = None,
    metric: MetricOpt = None,
    seed: Annotated[int, flag_option("seed", "--seed", help="Seed of the parity inputs.")] = 0,
    no_contract: Annotated[
        bool, flag_option("contract", "--no-contract", help="Do not write the contract.")
    ] = False,
    ops_library: OpsLibraryOpt = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """Export a PyTorch module, then prove the ONNX model against it at shapes it was not traced at.

    After export, every `--dynamic` axis must still be symbolic (an example of size 1 on such an
    axis is repeated to 2 first, because torch.export makes size-1 axes static), and the model
    must match the module at every dynamic axis = 1, 7 and a larger size, with seeded inputs that
    follow the example's values. A miss is exit 1 and nothing is written; a failing exporter is
    diagnosed (the operator or construct, the module path when known, what to do), with the full
    trace under -v. On success `<out>.contract.json` and `<out>.golden.npz` are written beside it.

    Exit codes: 0 exported and proved; 1 the exporter failed, a dynamic axis came out fixed, or
    parity missed (nothing written); 2 bad options or entry point; 3 the torch extra is missing.
    """
    from onnxgate.export import TorchExportConfig, export_torch, parse_dynamic

    config = build(
        TorchExportConfig,
        out=out_path,
        example_inputs=example_inputs,
        dynamic=parse_dynamic(dynamic),
        output_names=tuple(output_name or ()),
        opset=opset,
        runtime=runtime,
        exporter=exporter,
        tolerances=tolerance_settings(atol, rtol, tol, metric),
        seed=seed,
        contract=not no_contract,
        ops_libraries=tuple(ops_library or ()),
    )
    with progress_line(fmt == Format.text) as progress:
        report = export_torch(entry, config, progress=progress)
    _show(report, fmt)


@export_app.command("sklearn")
@handles_errors
def sklearn_command(
    estimator: Annotated[
        Path,
        typer.Argument(
            help="A joblib or pickle file holding the fitted estimator or pipeline.",
            show_default=False,
        ),
    ],
    out_path: Annotated[Path, typer.Option("--out", "-o", help="The .onnx file to write.")],
    data: Annotated[
        Path,
        flag_option("data", "--data", help="Rows to prove parity on: X.npy, or an .npz holding X."),
    ],
    trust_pickle: Annotated[
        bool, typer.Option("--trust-pickle", help="Required: unpickling runs code from the file.")
    ] = False,
    dtype: Annotated[
        str, flag_option("dtype", "--dtype", help="float32 (default) or float64 inputs.")
    ] = "float32",
    opset: Annotated[
        int | None, typer.Option("--opset", help="ai.onnx opset to export at.", show_default=False)
    ] = None,
    runtime: RuntimeOpt = None,
    atol: AtolOpt = None,
    rtol: RtolOpt = None,
    tol: TolOpt = None,
    metric: MetricOpt = None,
    no_contract: Annotated[
        bool, typer.Option("--no-contract", help="Do not write the contract.")
    ] = False,
    ops_library: OpsLibraryOpt = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """Export a scikit-learn estimator or pipeline with skl2onnx and prove it on your data.

    ZipMap is off (probabilities are a [rows, classes] tensor); inputs are float32 unless
    --dtype float64. Parity on every row of --data: labels equal, probabilities within tolerance.

    Exit codes: 0 exported and proved; 1 the converter failed or parity missed (nothing
    written); 2 bad options or data, or a pickle without --trust-pickle; 3 the sklearn extra is
    missing.
    """
    from onnxgate.export import SklearnExportConfig, export_sklearn

    config = build(
        SklearnExportConfig,
        out=out_path,
        data=data,
        dtype=dtype,
        opset=opset,
        runtime=runtime,
        tolerances=tolerance_settings(atol, rtol, tol, metric),
        contract=not no_contract,
        ops_libraries=tuple(ops_library or ()),
    )
    with progress_line(fmt == Format.text) as progress:
        report = export_sklearn(estimator, config, trust_pickle=trust_pickle, progress=progress)
    _show(report, fmt)


_TF_DEFAULTS = TfToolchain()


def _tf_command(source: Path, fmt: Format, **options: Any) -> None:
    from onnxgate.export import TfExportConfig, export_tf, parse_dynamic

    options["dynamic"] = parse_dynamic(options["dynamic"])
    config = build(TfExportConfig, **options)
    with progress_line(fmt == Format.text) as progress:
        report = export_tf(source, config, progress=progress)
    _show(report, fmt)


SourceArg = Annotated[
    Path,
    typer.Argument(
        help="A SavedModel folder (holding saved_model.pb), or a Keras file (.keras, .h5).",
        show_default=False,
    ),
]
KerasArg = Annotated[Path, typer.Argument(help="A Keras file (.keras, .h5).", show_default=False)]
OutOpt = Annotated[Path, flag_option("out", "--out", "-o", help="The .onnx file to write.")]
TfOpsetOpt = Annotated[
    int,
    flag_option(
        "opset",
        "--opset",
        help="ai.onnx opset to convert at. A TensorFlow op tf2onnx converts only from a later "
        "opset is named in the error, with the opset to use.",
    ),
]
PathOpt = Annotated[
    list[str] | None,
    flag_option(
        "paths",
        "--path",
        help="A conversion path to try (repeatable): tf2onnx-keras (tf2onnx.convert.from_keras), "
        "tf2onnx-saved-model (the SavedModel through tf2onnx; a Keras file is exported to one "
        "first), keras-onnx (Keras' own model.export(format='onnx')). Default: every one that "
        "applies; each is proved and the closest to TensorFlow kept.",
        show_default=False,
    ),
]
TfDynamicOpt = Annotated[
    list[str] | None,
    flag_option(
        "dynamic",
        "--dynamic",
        help="Label a dynamic (None) axis of the model's inputs, INPUT:AXIS=LABEL (repeatable): "
        "--dynamic tokens:1=seq. Axes with one label share a size; unlabelled ones are batch "
        "(axis 0) or INPUT_AXIS.",
        show_default=False,
    ),
]
TfExamplesOpt = Annotated[
    Path | None,
    flag_option(
        "example_inputs",
        "--example-inputs",
        help="An .npz of example inputs by name: their shapes and value ranges (token ids) seed "
        "the parity inputs. Default: normal floats, integers 0..9.",
        show_default=False,
    ),
]
CustomOpt = Annotated[
    list[Path] | None,
    flag_option(
        "custom_objects",
        "--custom-objects",
        help="A Python file defining and registering (keras.saving.register_keras_serializable) "
        "the model's custom layers, imported in TensorFlow's environment before loading "
        "(repeatable).",
        show_default=False,
    ),
]
TfVersionOpt = Annotated[
    str,
    flag_option(
        "tf_version",
        "--tf-version",
        help="tensorflow-cpu release of the isolated environment (built once per machine, "
        "about 1.6 GB).",
    ),
]
Tf2onnxVersionOpt = Annotated[
    str, flag_option("tf2onnx_version", "--tf2onnx-version", help="tf2onnx release.")
]
KerasVersionOpt = Annotated[
    str, flag_option("keras_version", "--keras-version", help="Keras release.")
]
SeedOpt = Annotated[int, flag_option("seed", "--seed", help="Seed of the parity inputs.")]
NoContractOpt = Annotated[
    bool, flag_option("contract", "--no-contract", help="Do not write the contract.")
]

_TF_DOC = """

    TensorFlow runs in an isolated environment (TensorFlow brings protobuf 7, which onnxgate's
    own cannot hold), built on first use in onnxgate's cache (about a minute, 1.6 GB) and named
    by --tf-version, --tf2onnx-version and --keras-version. Every conversion path that applies
    is tried (--path to choose); each file is run by ONNX Runtime against TensorFlow on seeded
    inputs with every dynamic axis at both ends of its range and between (a batch 1, 7 and 32;
    a sequence 1, its middle and 19), and the one closest to TensorFlow (max abs error; a tie:
    fewer nodes, then tf2onnx) is written, with every path's figures in the report. An op
    tf2onnx cannot convert is named with the Keras layer that holds it and the opset from which
    tf2onnx converts it, if any. On success `<out>.contract.json` and `<out>.golden.npz` are
    written beside it.

    Exit codes: 0 exported and proved; 1 no path converts, or the best one misses parity
    (nothing written); 2 bad options, or a source TensorFlow cannot load; 3 TensorFlow's
    environment cannot be built.
    """


@export_app.command("tf")
@handles_errors
def tf_command(
    source: SourceArg,
    out_path: OutOpt,
    opset: TfOpsetOpt = 17,
    path: PathOpt = None,
    dynamic: TfDynamicOpt = None,
    example_inputs: TfExamplesOpt = None,
    custom_objects: CustomOpt = None,
    runtime: RuntimeOpt = None,
    tf_version: TfVersionOpt = _TF_DEFAULTS.tensorflow,
    tf2onnx_version: Tf2onnxVersionOpt = _TF_DEFAULTS.tf2onnx,
    keras_version: KerasVersionOpt = _TF_DEFAULTS.keras,
    atol: AtolOpt = None,
    rtol: RtolOpt = None,
    tol: TolOpt = None,
    metric: MetricOpt = None,
    seed: SeedOpt = 0,
    no_contract: NoContractOpt = False,
    ops_library: OpsLibraryOpt = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """Export a TensorFlow SavedModel or a Keras file, proved against TensorFlow at three shapes."""
    _tf_command(
        source,
        fmt,
        out=out_path,
        format="auto",
        opset=opset,
        paths=tuple(path or ()),
        dynamic=dynamic,
        example_inputs=example_inputs,
        custom_objects=tuple(custom_objects or ()),
        runtime=runtime,
        tf_version=tf_version,
        tf2onnx_version=tf2onnx_version,
        keras_version=keras_version,
        tolerances=tolerance_settings(atol, rtol, tol, metric),
        seed=seed,
        contract=not no_contract,
        ops_libraries=tuple(ops_library or ()),
    )


@export_app.command("keras")
@handles_errors
def keras_command(
    source: KerasArg,
    out_path: OutOpt,
    opset: TfOpsetOpt = 17,
    path: PathOpt = None,
    dynamic: TfDynamicOpt = None,
    example_inputs: TfExamplesOpt = None,
    custom_objects: CustomOpt = None,
    runtime: RuntimeOpt = None,
    tf_version: TfVersionOpt = _TF_DEFAULTS.tensorflow,
    tf2onnx_version: Tf2onnxVersionOpt = _TF_DEFAULTS.tf2onnx,
    keras_version: KerasVersionOpt = _TF_DEFAULTS.keras,
    atol: AtolOpt = None,
    rtol: RtolOpt = None,
    tol: TolOpt = None,
    metric: MetricOpt = None,
    seed: SeedOpt = 0,
    no_contract: NoContractOpt = False,
    ops_library: OpsLibraryOpt = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """Export a Keras file (.keras, .h5): `export tf` with the source a Keras model."""
    _tf_command(
        source,
        fmt,
        out=out_path,
        format="keras",
        opset=opset,
        paths=tuple(path or ()),
        dynamic=dynamic,
        example_inputs=example_inputs,
        custom_objects=tuple(custom_objects or ()),
        runtime=runtime,
        tf_version=tf_version,
        tf2onnx_version=tf2onnx_version,
        keras_version=keras_version,
        tolerances=tolerance_settings(atol, rtol, tol, metric),
        seed=seed,
        contract=not no_contract,
        ops_libraries=tuple(ops_library or ()),
    )


assert tf_command.__doc__ is not None and keras_command.__doc__ is not None
tf_command.__doc__ += _TF_DOC
keras_command.__doc__ += _TF_DOC
