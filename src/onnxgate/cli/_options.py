"""Options several commands share, in groups, and the one place that turns them into settings.

Typer has no argument groups, so a group is two things kept together here: option types that
carry the group's help panel (``--help`` shows them under "Session", "Input feeds",
"Tolerances", "Output"), and one function that turns the group's values into its settings part:
``session_settings`` → ``SessionSettings``, ``feed_settings`` → ``FeedSettings``,
``tolerance_settings`` → ``Tolerances``. A command lists the group's options in its signature and
passes their values to that function; no command parses those flags itself.

Library messages name config fields (``feeds.dims``, ``session.threads``); ``_flags.FLAGS`` is
the one table that turns them into this CLI's flags (``--dim``, ``--threads``) when an error is
shown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError

from onnxgate.cli._common import FORMAT_HELP, Format
from onnxgate.cli._flags import flag_option, translated
from onnxgate.errors import ConfigError
from onnxgate.settings import FeedSettings, Part, SessionSettings, Tolerances, invalid

SESSION = "Session"
FEEDS = "Input feeds"
TOLERANCES = "Tolerances"
OUTPUT = "Output"
"""Help panels: the groups ``--help`` shows options in."""

FormatOpt = Annotated[
    Format, typer.Option("--format", "-f", help=FORMAT_HELP, rich_help_panel=OUTPUT)
]

InputsOpt = Annotated[
    Path | None,
    flag_option(
        "feeds.inputs",
        "--inputs",
        "-i",
        help="Input data: an .npz file, a JSON file ({input: nested list} or a list of them), a "
        "test_data_set_* folder of input_*.pb, or a folder of those or of .npz files. Without it, "
        "seeded synthetic feeds are generated from the model's signature.",
        show_default=False,
        rich_help_panel=FEEDS,
    ),
]
DimOpt = Annotated[
    list[str] | None,
    flag_option(
        "feeds.dims",
        "--dim",
        "-d",
        help="Size of a free dimension for synthetic feeds, NAME=SIZE[,SIZE...]; several sizes "
        "give several samples (e.g. --dim batch=1,7 --dim seq=128). A dimension without a name "
        "is INPUT[AXIS] (--dim images[2]=640). Left out, sizes come from the contract's samples, "
        "then the dimension's role (batch 3, never 1, which would hide broadcasting bugs; image "
        "height and width 224; token positions 128; others 3), checked against the graph's "
        "shape inference.",
        show_default=False,
        rich_help_panel=FEEDS,
    ),
]
RangeOpt = Annotated[
    list[str] | None,
    flag_option(
        "feeds.ranges",
        "--range",
        help="Values of an input for synthetic feeds: INPUT=LOW:HIGH (HIGH excluded) or "
        "INPUT=VALUE. Defaults: floats in [0, 1), integers in [0, 10), integer inputs that index "
        "an embedding table below its row count, inputs named *mask* all ones.",
        show_default=False,
        rich_help_panel=FEEDS,
    ),
]
SeedOpt = Annotated[
    int, flag_option("feeds.seed", "--seed", help="Seed of synthetic feeds.", rich_help_panel=FEEDS)
]
ProvidersOpt = Annotated[
    list[str] | None,
    flag_option(
        "session.providers",
        "--providers",
        "-p",
        help="ONNX Runtime execution providers in preference order, comma-separated or repeated "
        "(cuda or CUDAExecutionProvider), each with options as NAME:KEY=VALUE[,KEY=VALUE...] "
        "(e.g. openvino:precision=FP32,num_of_threads=2,cpu). CPU is appended, as ONNX Runtime "
        "does. A provider that does not start is an error (exit 3), never a silent CPU run.",
        show_default=False,
        rich_help_panel=SESSION,
    ),
]
ProviderOptionOpt = Annotated[
    list[str] | None,
    flag_option(
        "session.provider_options",
        "--provider-option",
        help="An option of one provider, PROVIDER:KEY=VALUE, repeatable "
        "(e.g. cuda:device_id=1, tensorrt:trt_fp16_enable=1).",
        show_default=False,
        rich_help_panel=SESSION,
    ),
]
OptLevelOpt = Annotated[
    str,
    flag_option(
        "session.opt_level",
        "--opt-level",
        help="ONNX Runtime graph optimisation level: disable, basic, extended, layout or all.",
        rich_help_panel=SESSION,
    ),
]
ThreadsOpt = Annotated[
    int,
    flag_option(
        "session.threads",
        "--threads",
        help="Intra-op threads; 0 lets ONNX Runtime choose.",
        rich_help_panel=SESSION,
    ),
]
SessionConfigOpt = Annotated[
    list[str] | None,
    flag_option(
        "session.session_config",
        "--session-config",
        help="An ONNX Runtime session config entry KEY=VALUE, repeatable "
        "(e.g. session.intra_op.allow_spinning=0).",
        show_default=False,
        rich_help_panel=SESSION,
    ),
]


TolOpt = Annotated[
    list[str] | None,
    flag_option(
        "tolerances.per_output",
        "--tol",
        help="Tolerance of one output, OUTPUT:ATOL,RTOL (repeatable).",
        show_default=False,
        rich_help_panel=TOLERANCES,
    ),
]
MetricOpt = Annotated[
    list[str] | None,
    flag_option(
        "tolerances.metrics",
        "--metric",
        help="Judge an output by one figure: [OUTPUT:]METRIC OP VALUE, e.g. sentence_embedding:cosine>=0.999 (see `compare --help`).",
        show_default=False,
        rich_help_panel=TOLERANCES,
    ),
]
AtolOpt = Annotated[
    float | None,
    flag_option(
        "tolerances.atol",
        "--atol",
        help="Absolute tolerance of float outputs.",
        show_default=False,
        rich_help_panel=TOLERANCES,
    ),
]
RtolOpt = Annotated[
    float | None,
    flag_option(
        "tolerances.rtol",
        "--rtol",
        help="Relative tolerance of float outputs.",
        show_default=False,
        rich_help_panel=TOLERANCES,
    ),
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


S = TypeVar("S", bound=Part)


def build(part: type[S], **values: Any) -> S:
    """``part(**values)``; a refused value is a ConfigError naming its flag.

    Raises:
        ConfigError: a value the part refuses, or settings that contradict each other.
    """
    try:
        return part(**values)
    except ValidationError as error:
        raise translated(invalid(error, part)) from error


def session_settings(
    providers: list[str] | None,
    provider_option: list[str] | None,
    opt_level: str,
    threads: int,
    session_config: list[str] | None,
) -> SessionSettings:
    """The ``SessionSettings`` the "Session" options describe.

    Raises:
        ConfigError: a --provider-option or --session-config item that is not KEY=VALUE, or a
            level or thread count outside its choices.
    """
    return build(
        SessionSettings,
        providers=tuple(providers or ()),
        provider_options=parse_provider_options(provider_option),
        opt_level=opt_level,
        threads=threads,
        session_config=parse_pairs(session_config, "--session-config"),
    )


def feed_settings(
    inputs: Path | None, dim: list[str] | None, value_range: list[str] | None, seed: int
) -> FeedSettings:
    """The ``FeedSettings`` the "Input feeds" options describe, checked before any work starts.

    Raises:
        ConfigError: a --dim or --range item that is malformed.
    """
    from onnxgate.data import parse_dims, parse_ranges

    parse_ranges(value_range)  # refuses a malformed item with the syntax in the message
    ranges = {}
    for item in value_range or ():
        name, _, text = item.partition("=")
        ranges[name.strip()] = text.strip()
    return build(
        FeedSettings,
        inputs=inputs,
        dims=parse_dims(dim),
        ranges=ranges,
        seed=seed,
    )


def build_starter_dims(items: list[str] | None) -> dict[str, list[int]]:
    """``--dim`` of ``gate init``: ``NAME=MIN,MAX`` or ``NAME=SIZE`` → ``{name: [MIN, MAX]}``.

    Raises:
        ConfigError: an item is not NAME=MIN,MAX or NAME=SIZE with sizes of 1 or more, MIN first.
    """
    from onnxgate.data import parse_dims

    dims = parse_dims(items)
    for name, sizes in dims.items():
        if len(sizes) > 2 or sizes != sorted(sizes):
            raise ConfigError(
                f"--dim {name}={','.join(map(str, sizes))} is not NAME=MIN,MAX or NAME=SIZE.",
                hint="The serving range of a dimension: for example --dim width=16,512.",
            )
    return dims


def tolerance_settings(
    atol: float | None, rtol: float | None, tol: list[str] | None, metric: list[str] | None
) -> Tolerances:
    """The ``Tolerances`` the "Tolerances" options describe.

    Raises:
        ConfigError: a --tol or --metric item that is malformed, or a negative tolerance.
    """
    from onnxgate.settings import parse_metric, parse_tolerance

    per_output = {}
    for item in tol or ():
        name, found = parse_tolerance(item)
        per_output[name] = (found.atol, found.rtol)
    for item in metric or ():
        # refuses a malformed rule with the syntax in the message
        parse_metric(item, path="tolerances.metrics")
    return build(
        Tolerances, atol=atol, rtol=rtol, per_output=per_output, metrics=tuple(metric or ())
    )
