"""``onnxgate serve REF [REF ...]``: the Open Inference Protocol over REST and gRPC."""

from __future__ import annotations

import logging
import sys
from enum import StrEnum
from typing import Annotated

import typer

from onnxgate.cli._common import Format, configure_logging, err, handles_errors
from onnxgate.cli._flags import flag_option
from onnxgate.cli._options import (
    FROM_FLAGS,
    SessionFlags,
    build,
    session_options,
)
from onnxgate.errors import ConfigError, ExitCode, ExtraMissing

SERVING = "Serving"
BATCHING = "Batching and limits"
SHADOW = "Shadow serving"
WATCHING = "Watching: drift and provider fallback"


class OnFallback(StrEnum):
    """What a provider fallback does (``WatchSettings.on_fallback``)."""

    alert = "alert"
    unready = "unready"


HELP = """Serve gated models over the Open Inference Protocol (KServe v2), REST and gRPC.

`tritonclient.http` and `tritonclient.grpc` work against it unchanged: health, readiness,
metadata, inference with JSON or binary tensors, requested outputs, request ids, versions.
Prometheus metrics are at `/metrics` on the HTTP port.

REF is a registry version (`NAME@ALIAS`, `NAME@3`, `NAME:3`, `NAME` for the latest), a version
on an MLflow tracking server that `registry publish mlflow` published (`mlflow:/models/NAME@ALIAS`,
`mlflow:/models/NAME/3`; downloaded into the cache, each file checked against its sha256), or a
model file beside its contract; `NAME=REF` serves it under another name. A registry version whose gate
did not pass is refused (so is a file without a passing gate `report.json` beside it) unless
`--allow-ungated`.

At load each model is proven on this host with the session that will serve it (its files are the
contract's by sha256, every node is on the provider the gate required, every golden sample is
within its rule); a model that fails stays NOT READY, with the reason in the log and in its
metadata, and the server's readiness is false. Every request is held to the contract: datatype,
rank, fixed dims, symbolic dims within the sizes the contract proved, value bounds (token ids
below the vocabulary), size; a refusal is a 400 / INVALID_ARGUMENT naming the input and the rule.

Requests are batched along the batch axis the contract proves. A reference that follows an alias
is looked up every `--poll` seconds: when the alias moves to another passing version, that
version is loaded and proven beside the old one and requests switch to it without failing.
SIGTERM stops gracefully: readiness turns false, in-flight requests finish (`--grace`).

`--shadow CANDIDATE` runs a candidate beside a served model on its live traffic: the champion
answers every request as without it; afterwards a sampled share (`--shadow-fraction`) is run on
the candidate in a low-priority background thread and each output is judged by the candidate
contract's rules, as `compare` judges. CANDIDATE names the served model it shadows:
`minilm@candidate` (an alias, followed like `@champion`), `minilm@5`, or `minilm=cand.onnx` for a
file. The candidate is proven first; one that is not ready never shadows, and says why. The
candidate runs only while the server answers nothing (`--shadow-busy`): a request that arrives
cancels its run, which is tried again later. Under load shadowing stops first: a request is shed
(queue_full) when the candidate's queue is full.
Figures are in `/metrics` (`onnxgate_shadow_*`) and at
`GET /v2/models/NAME/shadow`; with registry versions on both sides the pairs are also written to
the registry for `registry shadow-report`.

While serving, traffic is watched off the request path: per input and output, its values are
compared with the golden samples' and with the first window of traffic (population stability
index, `onnxgate_drift_score`; `onnxgate_drift_alert` above `--watch-threshold`), inputs outside
what the goldens spanned and NaN/Inf outputs are counted, and every `--placement-check` seconds
a fresh session's placement is audited: a provider that stops claiming nodes raises
`onnxgate_provider_fallback` (and, with `--on-fallback unready`, turns the version not ready).
Alerting rules for these: docs/alerts/onnxgate.rules.yml.

Example: `onnxgate serve minilm@champion --registry sqlite:///registry.db`, then
`curl localhost:8000/v2/health/ready`; with a shadow: `onnxgate serve minilm@champion --shadow
minilm@candidate --shadow-fraction 0.2`, then `curl localhost:8000/v2/models/minilm/shadow`.

Exit codes: 0 stopped cleanly · 1 a model's gate did not pass, or its downloaded bytes are not
the ones published · 2 bad reference or option, unknown model, version or alias · 3 a port,
provider, extra, the registry or the MLflow server is unavailable."""


@handles_errors
@session_options(
    "providers", "provider_options", "opt_level", "threads", "session_config", "ops_libraries"
)
def serve_command(
    refs: Annotated[
        list[str],
        typer.Argument(
            help="Registry references (NAME@ALIAS, NAME@3, NAME:3), MLflow versions "
            "(mlflow:/models/NAME@ALIAS) or model files; NAME=REF renames.",
            metavar="REF...",
            show_default=False,
        ),
    ],
    registry: Annotated[
        str | None,
        typer.Option(
            "--registry",
            help="Registry database URL or SQLite path. Default: $ONNXGATE_REGISTRY, else "
            "onnxgate's user data folder.",
            show_default=False,
            rich_help_panel=SERVING,
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="The registry's artefact store: a folder or s3://BUCKET/PREFIX. Default: "
            "$ONNXGATE_STORE, else beside a SQLite registry.",
            show_default=False,
            rich_help_panel=SERVING,
        ),
    ] = None,
    mlflow_tracking_uri: Annotated[
        str | None,
        typer.Option(
            "--mlflow-tracking-uri",
            help="The MLflow tracking server of mlflow:/models/… references (credentials in "
            "it are masked in every output). Default: $MLFLOW_TRACKING_URI.",
            show_default=False,
            rich_help_panel=SERVING,
        ),
    ] = None,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on.", rich_help_panel=SERVING)
    ] = "127.0.0.1",
    http_port: Annotated[
        int,
        typer.Option("--http-port", help="REST port; 0 turns REST off.", rich_help_panel=SERVING),
    ] = 8000,
    grpc_port: Annotated[
        int,
        typer.Option("--grpc-port", help="gRPC port; 0 turns gRPC off.", rich_help_panel=SERVING),
    ] = 8001,
    allow_ungated: Annotated[
        bool,
        typer.Option(
            "--allow-ungated",
            help="Serve versions whose gate did not pass, and files without a gate report.",
            rich_help_panel=SERVING,
        ),
    ] = False,
    variant: Annotated[
        str | None,
        typer.Option(
            "--variant",
            help="Serve the version's model.VARIANT artefact (e.g. int8) instead of its model.",
            show_default=False,
            rich_help_panel=SERVING,
        ),
    ] = None,
    poll: Annotated[
        float,
        typer.Option(
            "--poll",
            help="Seconds between registry lookups of followed aliases; 0 never.",
            rich_help_panel=SERVING,
        ),
    ] = 5.0,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            help="Seconds a stop or an alias switch waits for requests in flight.",
            rich_help_panel=SERVING,
        ),
    ] = 30.0,
    tuned: Annotated[
        bool,
        typer.Option(
            "--tuned/--no-tuned",
            help="Use the settings `tune` recorded for this machine in the contract, if one "
            "record matches.",
            rich_help_panel=SERVING,
        ),
    ] = True,
    batching: Annotated[
        bool,
        typer.Option(
            "--batching/--no-batching", help="Dynamic batching.", rich_help_panel=BATCHING
        ),
    ] = True,
    max_batch: Annotated[
        int | None,
        typer.Option(
            "--max-batch",
            help="Samples per execution at most. Default: the largest batch the contract "
            "proved, at most 32 (never above what the contract proved).",
            show_default=False,
            rich_help_panel=BATCHING,
        ),
    ] = None,
    max_delay_ms: Annotated[
        float,
        typer.Option(
            "--max-delay-ms",
            help="How long the oldest request waits for others to join its batch.",
            rich_help_panel=BATCHING,
        ),
    ] = 2.0,
    max_queue: Annotated[
        int,
        typer.Option(
            "--max-queue",
            help="Requests pending per model at most; beyond, 503 / UNAVAILABLE.",
            rich_help_panel=BATCHING,
        ),
    ] = 256,
    instances: Annotated[
        int,
        typer.Option("--instances", help="Executions at once per model.", rich_help_panel=BATCHING),
    ] = 1,
    max_request_mb: Annotated[
        float,
        typer.Option(
            "--max-request-mb",
            help="Largest request: tensors (in memory) and body (on the wire, up to 4x for "
            "JSON); beyond, 413 / RESOURCE_EXHAUSTED.",
            rich_help_panel=BATCHING,
        ),
    ] = 64.0,
    max_header_bytes: Annotated[
        int,
        typer.Option(
            "--max-header-bytes",
            help="Largest request head: REST's request line and header fields (beyond, 431) "
            "and gRPC's metadata (beyond, RESOURCE_EXHAUSTED).",
            rich_help_panel=BATCHING,
        ),
    ] = 64 << 10,
    max_headers: Annotated[
        int,
        typer.Option(
            "--max-headers",
            help="Most header fields in a REST request; beyond, 431.",
            rich_help_panel=BATCHING,
        ),
    ] = 100,
    watch: Annotated[
        bool,
        flag_option(
            "watch.drift",
            "--watch/--no-watch",
            help="Summarise traffic for drift (off the request path; a request that finds the "
            "watch's queue full is answered and not summarised).",
            rich_help_panel=WATCHING,
        ),
    ] = True,
    watch_fraction: Annotated[
        float,
        flag_option(
            "watch.fraction",
            "--watch-fraction",
            help="Share of requests summarised (every k-th): lower it on very busy servers.",
            rich_help_panel=WATCHING,
        ),
    ] = 1.0,
    watch_window: Annotated[
        int,
        flag_option(
            "watch.window_rows",
            "--watch-window",
            help="Rows per window: the first is the reference, each later one is scored "
            "against it and against the golden samples.",
            rich_help_panel=WATCHING,
        ),
    ] = 1000,
    watch_threshold: Annotated[
        float,
        flag_option(
            "watch.threshold",
            "--watch-threshold",
            help="Population stability index above which a tensor's drift alert is raised "
            "(below 0.1 no shift, 0.1-0.25 moderate, above 0.25 significant).",
            rich_help_panel=WATCHING,
        ),
    ] = 0.25,
    placement_check: Annotated[
        float,
        flag_option(
            "watch.placement_seconds",
            "--placement-check",
            help="Seconds between audits of each version's placement with a fresh session "
            "(a driver or plugin change makes nodes fall back to CPU); 0 never.",
            rich_help_panel=WATCHING,
        ),
    ] = 600.0,
    on_fallback: Annotated[
        OnFallback,
        flag_option(
            "watch.on_fallback",
            "--on-fallback",
            help="alert: export onnxgate_provider_fallback only (answers stay correct, only "
            "slower; a fleet-wide driver change would otherwise take every replica out); "
            "unready: also turn the version not ready until placement holds again.",
            rich_help_panel=WATCHING,
        ),
    ] = OnFallback.alert,
    model_option: Annotated[
        list[str] | None,
        typer.Option(
            "--model-option",
            help="A setting for one served model, NAME:KEY=VALUE (repeatable), KEY one of "
            "batching, max_batch, max_delay_ms, max_queue, instances: --model-option "
            "bert:max_batch=8 --model-option resnet:instances=2.",
            show_default=False,
            rich_help_panel=BATCHING,
        ),
    ] = None,
    shadow: Annotated[
        list[str] | None,
        flag_option(
            "shadow.candidates",
            "--shadow",
            help="A candidate to run beside a served model on its traffic, judged by its "
            "contract's rules (repeatable): NAME@ALIAS (followed), NAME@N, or NAME=FILE, NAME "
            "being the served model it shadows.",
            metavar="CANDIDATE",
            show_default=False,
            rich_help_panel=SHADOW,
        ),
    ] = None,
    shadow_fraction: Annotated[
        float,
        flag_option(
            "shadow.fraction",
            "--shadow-fraction",
            help="Share of the answered requests also run on each candidate (0 to 1).",
            rich_help_panel=SHADOW,
        ),
    ] = 1.0,
    shadow_queue: Annotated[
        int,
        flag_option(
            "shadow.max_queue",
            "--shadow-queue",
            help="Requests waiting for a candidate at most; beyond, shed (queue_full).",
            rich_help_panel=SHADOW,
        ),
    ] = 32,
    shadow_busy: Annotated[
        int,
        flag_option(
            "shadow.busy_at",
            "--shadow-busy",
            help="Requests in flight in this server at which candidates yield: no candidate run "
            "starts, and one under way is cancelled and tried again later. 1 (the default): "
            "candidates run only while the server answers nothing. Raise it only where the "
            "champion does not use every core.",
            rich_help_panel=SHADOW,
        ),
    ] = 1,
    shadow_threads: Annotated[
        int,
        flag_option(
            "shadow.threads",
            "--shadow-threads",
            help="Intra-op threads of a candidate's session (it never spins).",
            rich_help_panel=SHADOW,
        ),
    ] = 1,
    shadow_keep_inputs: Annotated[
        bool,
        flag_option(
            "shadow.keep_inputs",
            "--shadow-keep-inputs",
            help="Keep shadowed requests' inputs (in the registry's pairs); by default only "
            "their sha256 is kept.",
            rich_help_panel=SHADOW,
        ),
    ] = False,
    shadow_record: Annotated[
        int,
        flag_option(
            "shadow.keep_pairs",
            "--shadow-record",
            help="Newest judged pairs kept in memory per candidate (GET /v2/models/NAME/shadow).",
            rich_help_panel=SHADOW,
        ),
    ] = 100,
    session: SessionFlags = FROM_FLAGS,
    fmt: Annotated[
        Format,
        typer.Option(
            "--format",
            "-f",
            help="json: an error that stops the server before it serves is one JSON document "
            "on stdout (the server's log is on stderr either way).",
        ),
    ] = Format.text,
) -> None:
    """Serve gated models over the Open Inference Protocol (REST and gRPC)."""
    try:
        import grpc  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as missing:
        raise ExtraMissing(
            f"`onnxgate serve` needs the 'serve' extra ({missing.name} is not installed).",
            extra="serve",
        ) from None
    from onnxgate.serve import ModelSettings, PredictorConfig, ServeConfig, serve

    settings = session.settings()
    common = build(
        ModelSettings,
        batching=batching,
        max_batch=max_batch,
        max_delay_ms=max_delay_ms,
        max_queue=max_queue,
        instances=instances,
    )
    limit = int(max_request_mb * (1 << 20))
    config = build(
        ServeConfig,
        predictor=build(
            PredictorConfig,
            session=settings,
            tuned=tuned,
            max_request_bytes=max(limit, 1),
            allow_ungated=allow_ungated,
            variant=variant,
            registry=registry,
            store=store,
            mlflow_tracking_uri=mlflow_tracking_uri,
        ),
        model=common,
        models={
            name: build(ModelSettings, **(common.model_dump() | pairs))
            for name, pairs in _per_model(model_option).items()
        },
        poll_seconds=poll,
        grace_seconds=grace,
        max_body_bytes=max(4 * limit, 1024),
        max_header_bytes=max_header_bytes,
        max_headers=max_headers,
        shadow=dict(  # built by ServeConfig: a refused value is named by its flag
            candidates=tuple(shadow or ()),
            fraction=shadow_fraction,
            max_queue=shadow_queue,
            busy_at=shadow_busy,
            threads=shadow_threads,
            keep_inputs=shadow_keep_inputs,
            keep_pairs=shadow_record,
        ),
        watch=dict(  # validated inside ServeConfig: a refusal names watch.FIELD, shown as its flag
            drift=watch,
            fraction=watch_fraction,
            window_rows=watch_window,
            threshold=watch_threshold,
            placement_seconds=placement_check,
            on_fallback=on_fallback.value,
        ),
    )
    if not logging.getLogger().isEnabledFor(logging.INFO):
        configure_logging(1)  # a server says what it serves and why a model is not ready
        logging.getLogger("alembic").setLevel(logging.WARNING)  # the registry's migration check
    err.print(f"onnxgate serve: loading {', '.join(refs)}", highlight=False)
    serve(refs, config, host=host, http_port=http_port, grpc_port=grpc_port)
    sys.stderr.flush()
    raise typer.Exit(int(ExitCode.PASSED))


def _per_model(items: list[str] | None) -> dict[str, dict[str, str]]:
    """``["bert:max_batch=8"]`` → ``{"bert": {"max_batch": "8"}}`` (values checked by ModelSettings).

    Raises:
        ConfigError: an item is not NAME:KEY=VALUE.
    """
    found: dict[str, dict[str, str]] = {}
    for item in items or ():
        name, sep, pair = item.partition(":")
        key, eq, value = pair.partition("=")
        if not sep or not eq or not name.strip() or not key.strip():
            raise ConfigError(f"--model-option {item!r} is not NAME:KEY=VALUE.")
        found.setdefault(name.strip(), {})[key.strip()] = value.strip()
    return found
