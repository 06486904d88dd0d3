"""Options several commands share, in groups, and the one place that turns them into settings.

Typer has no argument groups, so a group is two things kept together here: option types that
carry the group's help panel (``--help`` shows them under "Session", "Input feeds",
"Tolerances", "Output"), and one function that turns the group's values into its settings part:
``session_settings`` → ``SessionSettings``, ``feed_settings`` → ``FeedSettings``,
``tolerance_settings`` → ``Tolerances``. A command lists the group's options in its signature and
passes their values to that function; no command parses those flags itself. The session group is
generated: ``SESSION_FLAGS`` holds one option per ``SessionSettings`` field, and
``session_options`` puts the ones a command offers into its signature.

Library messages name config fields (``feeds.dims``, ``session.threads``); ``_flags.FLAGS`` is
the one table that turns them into this CLI's flags (``--dim``, ``--threads``) when an error is
shown.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

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
P = ParamSpec("P")
R = TypeVar("R")


def build(part: type[S], **values: Any) -> S:
    """``part(**values)``; a refused value is a ConfigError naming its flag.

    Raises:
        ConfigError: a value the part refuses, or settings that contradict each other.
    """
    try:
        return part(**values)
    except ValidationError as error:
        raise translated(invalid(error, part)) from error


@dataclass(frozen=True)
class SessionFlag:
    """The flag of one ``SessionSettings`` field: its option, and how its value becomes the field's."""

    param: str
    """The command's parameter name (``no_arena`` for ``cpu_mem_arena``)."""
    option: Any
    """The parameter's annotation: its type and ``typer.Option`` (recorded in ``FLAGS``)."""
    default: Any
    """The flag's default, which gives the field's default."""
    value: Callable[[Any], Any] = lambda given: given
    """The flag's value as the field takes it."""


def _session_option(
    field: str,
    flag: str,
    kind: Any,
    help: str,
    *,
    short: str | None = None,
    show_default: bool = True,
) -> Any:
    """The annotation of a field's option, recorded in ``FLAGS`` as the flag of ``session.FIELD``."""
    names = [flag, *([short] if short else [])]
    extra = {} if show_default else {"show_default": False}
    option = flag_option(f"session.{field}", *names, help=help, rich_help_panel=SESSION, **extra)
    return Annotated[kind, option]


SESSION_FLAGS: dict[str, SessionFlag] = {
    "providers": SessionFlag(
        "providers",
        _session_option(
            "providers",
            "--providers",
            list[str] | None,
            "ONNX Runtime execution providers in preference order, comma-separated or repeated "
            "(cuda or CUDAExecutionProvider), each with options as NAME:KEY=VALUE[,KEY=VALUE...] "
            "(e.g. openvino:precision=FP32,num_of_threads=2,cpu). CPU is appended, as ONNX Runtime "
            "does. A provider that does not start is an error (exit 3), never a silent CPU run.",
            short="-p",
            show_default=False,
        ),
        None,
        lambda given: tuple(given or ()),
    ),
    "provider_options": SessionFlag(
        "provider_option",
        _session_option(
            "provider_options",
            "--provider-option",
            list[str] | None,
            "An option of one provider, PROVIDER:KEY=VALUE, repeatable "
            "(e.g. cuda:device_id=1, tensorrt:trt_fp16_enable=1).",
            show_default=False,
        ),
        None,
        parse_provider_options,
    ),
    "opt_level": SessionFlag(
        "opt_level",
        _session_option(
            "opt_level",
            "--opt-level",
            str,
            "ONNX Runtime graph optimisation level: disable, basic, extended, layout or all.",
        ),
        "all",
    ),
    "threads": SessionFlag(
        "threads",
        _session_option(
            "threads", "--threads", int, "Intra-op threads; 0 lets ONNX Runtime choose."
        ),
        0,
    ),
    "inter_op_threads": SessionFlag(
        "inter_op_threads",
        _session_option(
            "inter_op_threads",
            "--inter-op-threads",
            int,
            "Threads across operators (with --parallel).",
        ),
        0,
    ),
    "parallel": SessionFlag(
        "parallel",
        _session_option("parallel", "--parallel", bool, "Run independent branches in parallel."),
        False,
    ),
    "cpu_mem_arena": SessionFlag(
        "no_arena",
        _session_option(
            "cpu_mem_arena", "--no-arena", bool, "Turn off ONNX Runtime's CPU memory arena."
        ),
        False,
        lambda given: not given,
    ),
    "session_config": SessionFlag(
        "session_config",
        _session_option(
            "session_config",
            "--session-config",
            list[str] | None,
            "An ONNX Runtime session config entry KEY=VALUE, repeatable "
            "(e.g. session.intra_op.allow_spinning=0).",
            show_default=False,
        ),
        None,
        lambda given: parse_pairs(given, "--session-config"),
    ),
    "ops_libraries": SessionFlag(
        "ops_library",
        _session_option(
            "ops_libraries",
            "--ops-library",
            list[str] | None,
            "A custom operator library registered in every session, repeatable: the path of a "
            "shared library (.so, .dylib, .dll) that implements the model's custom-domain "
            "operators, or onnxruntime-extensions (the library that package ships: tokenizers, "
            "image and audio decoding). A contract records each one's name, version and sha256; "
            "verify and serve use the contract's when none is given and refuse a host whose "
            "library differs.",
            show_default=False,
        ),
        None,
        lambda given: tuple(given or ()),
    ),
}
"""The "Session" options, one per ``SessionSettings`` field a flag sets, in the fields' order.

A command offers some of them with ``session_options``; no command declares one itself.
"""

ProvidersOpt = SESSION_FLAGS["providers"].option
"""``--providers``, for a command whose providers are not a session's (``tune``)."""
OpsLibraryOpt = SESSION_FLAGS["ops_libraries"].option
"""``--ops-library``, for a command whose libraries are not a session's (``tune``)."""


def session_settings(**flags: Any) -> SessionSettings:
    """The ``SessionSettings`` the "Session" options describe, given by field name.

    Fields not given keep their defaults.

    Raises:
        ConfigError: a --provider-option or --session-config item that is not KEY=VALUE, or a
            level or thread count outside its choices.
    """
    values = {field: SESSION_FLAGS[field].value(given) for field, given in flags.items()}
    return build(SessionSettings, **values)


@dataclass(frozen=True)
class SessionFlags:
    """The "Session" options a command was given; ``settings()`` turns them into settings.

    Built by ``session_options`` before the command runs, read by the command where it wants
    the settings, so a bad value is refused in the same order as the command's other values.
    """

    given: Mapping[str, Any]
    """Each offered field's flag value, by field name."""

    def settings(self) -> SessionSettings:
        """The ``SessionSettings`` these options describe (see ``session_settings``).

        Raises:
            ConfigError: a malformed item, or a value the settings refuse (naming its flag).
        """
        return session_settings(**self.given)


FROM_FLAGS = SessionFlags({})
"""The default of a command's ``session`` parameter, which ``session_options`` replaces."""


def session_options(*fields: str) -> Callable[[Callable[P, R]], Callable[..., R]]:
    """Give a command the "Session" options of ``fields`` (``SessionSettings`` field names).

    The command declares ``session: SessionFlags = FROM_FLAGS`` where the options go in its
    signature; ``--help`` shows them there, in the order of ``fields``, and the command is called
    with them gathered into ``session``.
    """

    def wrap(command: Callable[P, R]) -> Callable[..., R]:
        signature = inspect.signature(command, eval_str=True)
        parameters: list[inspect.Parameter] = []
        for parameter in signature.parameters.values():
            if parameter.name != "session":
                parameters.append(parameter)
                continue
            for field in fields:
                flag = SESSION_FLAGS[field]
                parameters.append(
                    parameter.replace(name=flag.param, annotation=flag.option, default=flag.default)
                )

        @functools.wraps(command)
        def with_session(*args: Any, **kwargs: Any) -> R:
            given = {field: kwargs.pop(SESSION_FLAGS[field].param) for field in fields}
            return command(*args, session=SessionFlags(given), **kwargs)  # type: ignore[arg-type]

        with_session.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return with_session

    return wrap


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
