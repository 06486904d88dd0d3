"""Options several commands share: input feeds and ONNX Runtime session settings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from onnxgate.errors import ConfigError

if TYPE_CHECKING:
    from onnxgate.compare import CompareConfig
    from onnxgate.runners import OrtOptions

InputsOpt = Annotated[
    Path | None,
    typer.Option(
        "--inputs",
        "-i",
        help="Input data: an .npz file, a JSON file ({input: nested list} or a list of them), a "
        "test_data_set_* folder of input_*.pb, or a folder of those or of .npz files. Without it, "
        "seeded synthetic feeds are generated from the model's signature.",
        show_default=False,
    ),
]
DimOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--dim",
        "-d",
        help="Size of a symbolic dimension for synthetic feeds, NAME=SIZE[,SIZE...]; several "
        "sizes give several samples (e.g. --dim batch=1,7 --dim seq=128). Unnamed dimensions are "
        "3, never 1, which would hide broadcasting bugs.",
        show_default=False,
    ),
]
RangeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--range",
        help="Values of an input for synthetic feeds: INPUT=LOW:HIGH (HIGH excluded) or "
        "INPUT=VALUE. Defaults: floats in [0, 1), integers in [0, 10), integer inputs that index "
        "an embedding table below its row count, inputs named *mask* all ones.",
        show_default=False,
    ),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of synthetic feeds.")]
ProvidersOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--providers",
        "-p",
        help="ONNX Runtime execution providers in preference order, comma-separated or repeated "
        "(cuda or CUDAExecutionProvider), each with options as NAME:KEY=VALUE[,KEY=VALUE...] "
        "(e.g. openvino:precision=FP32,num_of_threads=2,cpu). CPU is appended, as ONNX Runtime "
        "does. A provider that does not start is an error (exit 3), never a silent CPU run.",
        show_default=False,
    ),
]
ProviderOptionOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--provider-option",
        help="An option of one provider, PROVIDER:KEY=VALUE, repeatable "
        "(e.g. cuda:device_id=1, tensorrt:trt_fp16_enable=1).",
        show_default=False,
    ),
]
OptLevelOpt = Annotated[
    str,
    typer.Option(
        "--opt-level",
        help="ONNX Runtime graph optimisation level: disable, basic, extended, layout or all.",
    ),
]
ThreadsOpt = Annotated[
    int, typer.Option("--threads", help="Intra-op threads; 0 lets ONNX Runtime choose.")
]
SessionConfigOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--session-config",
        help="An ONNX Runtime session config entry KEY=VALUE, repeatable "
        "(e.g. session.intra_op.allow_spinning=0).",
        show_default=False,
    ),
]


TolOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--tol", help="Tolerance of one output, OUTPUT:ATOL,RTOL (repeatable).", show_default=False
    ),
]
MetricOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--metric",
        help="Judge an output by one figure: [OUTPUT:]METRIC OP VALUE, e.g. sentence_embedding:cosine>=0.999 (see `compare --help`).",
        show_default=False,
    ),
]
AtolOpt = Annotated[
    float | None,
    typer.Option("--atol", help="Absolute tolerance of float outputs.", show_default=False),
]
RtolOpt = Annotated[
    float | None,
    typer.Option("--rtol", help="Relative tolerance of float outputs.", show_default=False),
]


def parse_pairs(items: list[str] | None, option: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` → ``{"a": "1", "b": "2"}``.

    Raises:
        ConfigError: an item has no ``=``.
    """
    pairs = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{option} {item!r} is not KEY=VALUE.")
        pairs[key.strip()] = value.strip()
    return pairs


def parse_provider_options(items: list[str] | None) -> dict[str, dict[str, str]]:
    """``["cuda:device_id=1"]`` → ``{"cuda": {"device_id": "1"}}`` (names resolved by the runner).

    Raises:
        ConfigError: an item is not PROVIDER:KEY=VALUE.
    """
    options: dict[str, dict[str, str]] = {}
    for item in items or ():
        provider, sep, pair = item.partition(":")
        if not sep or not provider.strip():
            raise ConfigError(f"--provider-option {item!r} is not PROVIDER:KEY=VALUE.")
        options.setdefault(provider.strip(), {}).update(parse_pairs([pair], "--provider-option"))
    return options


def ort_options(
    providers: list[str] | None,
    opt_level: str,
    threads: int,
    session_config: list[str] | None,
    optimized_model: Path | None = None,
    provider_options: list[str] | None = None,
) -> OrtOptions:
    """The ``OrtOptions`` the shared options describe."""
    from onnxgate.compat.providers import parse_providers
    from onnxgate.runners import OrtOptions

    names, inline = parse_providers(providers)
    options = inline
    for provider, pairs in parse_provider_options(provider_options).items():
        options.setdefault(provider, {}).update(pairs)
    return OrtOptions(
        providers=tuple(names),
        provider_options=options,
        optimization=opt_level,
        intra_op_threads=threads,
        config=parse_pairs(session_config, "--session-config"),
        optimized_model_path=optimized_model,
    )


def compare_config(
    atol: float | None, rtol: float | None, tol: list[str] | None, metric: list[str] | None
) -> CompareConfig:
    """The CompareConfig the shared tolerance options describe."""
    from onnxgate.compare import CompareConfig, parse_metric, parse_tolerance

    return CompareConfig(
        atol=atol,
        rtol=rtol,
        tolerances=dict(parse_tolerance(t) for t in tol or ()),
        metrics=dict(parse_metric(m) for m in metric or ()),
    )
