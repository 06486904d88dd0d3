"""``onnxgate registry list|show|promote|shadow-report|fetch|fsck|publish``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from onnxgate.cli._common import FORMAT_HELP, Format, emit_json, finish, handles_errors, out

if TYPE_CHECKING:
    from onnxgate._rich import Lines
    from onnxgate.registry import MlflowPublication, Registry

registry_app = typer.Typer(
    name="registry",
    help=(
        "Gated model versions, their aliases, gate runs and artefacts.\n\n"
        "A passing `onnxgate gate` registers a version (config `[register]`); versions are "
        "numbered 1, 2, 3 … per model and named `NAME@NUMBER`, `NAME@ALIAS` "
        "(`bert@champion`) or `NAME` (the latest). The database is a SQLite file by default, "
        "or any SQLAlchemy URL (`--registry` or `$ONNXGATE_REGISTRY`, e.g. "
        "`postgresql+psycopg://user@host/db`); artefacts live in a content-addressed store "
        "folder (`--store`, `$ONNXGATE_STORE`; by default beside the SQLite file).\n\n"
        "Exit codes: 0 done · 1 refused promotion, a shadow verdict that did not pass, "
        "inconsistent registry or damaged artefact "
        "· 2 bad reference or unknown model, version or alias · 3 the registry cannot be reached."
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)

RegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        help="Registry database URL (sqlite:////path/registry.db, "
        "postgresql+psycopg://user:pw@host:5432/db) or a SQLite file path. Default: "
        "$ONNXGATE_REGISTRY, else registry.db in onnxgate's user data folder.",
        show_default=False,
    ),
]
StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Artefact store: a folder, file:///PATH or s3://BUCKET/PREFIX (endpoint and "
        "credentials from AWS_* variables). Default: $ONNXGATE_STORE, else DB-store beside a "
        "SQLite file, else store/ in onnxgate's user data folder.",
        show_default=False,
    ),
]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)]
MinPairsOpt = Annotated[
    int,
    typer.Option(
        "--min-pairs", min=1, help="Shadowed requests the verdict needs in all (else inconclusive)."
    ),
]
MinPerBucketOpt = Annotated[
    int,
    typer.Option(
        "--min-per-bucket",
        min=1,
        help="Shadowed requests needed in every shape bucket traffic reached (else inconclusive).",
    ),
]
MaxFailureRateOpt = Annotated[
    float,
    typer.Option(
        "--max-failure-rate",
        min=0.0,
        max=1.0,
        help="Share of requests an output may fail its rule on (0: none may).",
    ),
]


def _open(registry: str | None, store: str | None, *, read_only: bool = False) -> Registry:
    from onnxgate.registry import open_registry

    return open_registry(registry, store, read_only=read_only)


def _print(lines: Lines) -> None:
    for item in lines:
        out.print(item)


@registry_app.command("list")
@handles_errors
def list_command(
    name: Annotated[
        str | None,
        typer.Argument(
            help="A model: list its versions instead of the models.", show_default=False
        ),
    ] = None,
    registry: RegistryOpt = None,
    store: StoreOpt = None,
    fmt: FormatOpt = Format.text,
) -> None:
    """List registered models, or the versions of one.

    For example:

        onnxgate registry list

        onnxgate registry list bert --format json

    Exit codes: 0 listed · 2 unknown model · 3 the registry cannot be reached.
    """
    from onnxgate.registry import render_models, render_versions

    with _open(registry, store, read_only=True) as reg:
        if name is None:
            models = reg.models()
            if fmt == Format.json:
                emit_json([m.model_dump(mode="json") for m in models])
                return
            _print(render_models(models, reg.url_masked))
            return
        versions = reg.versions(name)
    if fmt == Format.json:
        emit_json([v.model_dump(mode="json") for v in versions])
        return
    _print(render_versions(name, versions))


@registry_app.command("show")
@handles_errors
def show_command(
    ref: Annotated[
        str,
        typer.Argument(help="NAME@NUMBER, NAME@ALIAS or NAME (the latest).", show_default=False),
    ],
    report: Annotated[
        bool,
        typer.Option(
            "--report", help="Print the whole stored gate report (JSON) of the registering run."
        ),
    ] = False,
    registry: RegistryOpt = None,
    store: StoreOpt = None,
    fmt: FormatOpt = Format.text,
) -> None:
    """Show one version: status, aliases, artefacts, gate run steps, performance, promotions.

    Forced promotions are shown with their reason; the shadow runs the version took part in
    with their requests judged and failed, and the shadow-report command for the verdict.

    For example:

        onnxgate registry show bert@champion

        onnxgate registry show bert@3 --format json

        onnxgate registry show bert --report > report.json

    Exit codes: 0 shown · 2 bad reference or unknown model, version or alias · 3 the registry cannot be reached.
    """
    from onnxgate.registry import render_detail

    with _open(registry, store, read_only=True) as reg:
        if report:
            emit_json(reg.gate_report(ref))
            return
        detail = reg.show(ref)
    if fmt == Format.json:
        emit_json(detail.model_dump(mode="json"))
        return
    _print(render_detail(detail))


@registry_app.command("promote")
@handles_errors
def promote_command(
    ref: Annotated[
        str,
        typer.Argument(help="The version: NAME@NUMBER or NAME@OTHER-ALIAS.", show_default=False),
    ],
    alias: Annotated[
        str,
        typer.Argument(
            help="The alias to point at it (champion, prod): letters, digits, _ and -.",
            show_default=False,
        ),
    ],
    force: Annotated[
        bool,
        typer.Option("--force", help="Promote a version whose gate did not pass (needs --reason)."),
    ] = False,
    reason: Annotated[
        str | None,
        typer.Option(
            "--reason", help="Why; recorded with the promotion and shown by `registry show`."
        ),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option("--by", help="Who promotes (default: the login name).", show_default=False),
    ] = None,
    when_shadow_passes: Annotated[
        bool,
        typer.Option(
            "--when-shadow-passes",
            help="Move the alias only if the version's shadow verdict passes (see "
            "shadow-report); its figures are recorded with the promotion.",
        ),
    ] = False,
    against: Annotated[
        str | None,
        typer.Option(
            "--against",
            help="With --when-shadow-passes: the champion's alias the version was shadowed "
            "against. Default: ALIAS, the alias being moved.",
            show_default=False,
        ),
    ] = None,
    min_pairs: MinPairsOpt = 1000,
    min_per_bucket: MinPerBucketOpt = 30,
    max_failure_rate: MaxFailureRateOpt = 0.0,
    registry: RegistryOpt = None,
    store: StoreOpt = None,
    fmt: FormatOpt = Format.text,
) -> None:
    """Point NAME@ALIAS at a version; every move is recorded.

    A version whose gate did not pass is refused (exit 1) unless --force --reason TEXT; the
    forced promotion and its reason are recorded and shown by `registry show`.

    With --when-shadow-passes the alias moves only on a passing shadow verdict (the same as
    `registry shadow-report`, judged in the transaction that moves the alias); a failed or
    inconclusive verdict is refused (exit 1) naming the output, rule and count, or what the
    traffic lacks. --force does not override a shadow verdict.

    For example:

        onnxgate registry promote bert@7 champion

        onnxgate registry promote bert@champion prod

        onnxgate registry promote bert@8 champion --force --reason "p99 gate flaky on CI runner; measured 11 ms by hand"

        onnxgate registry promote bert@candidate champion --when-shadow-passes --min-pairs 5000

    Exit codes: 0 promoted · 1 refused (the version's gate did not pass, --force --reason overrides; or its shadow verdict failed or is inconclusive) · 2 bad reference or alias · 3 the registry cannot be reached.
    """
    from onnxgate.registry import render_promoted
    from onnxgate.shadow import ShadowCriteria

    criteria = ShadowCriteria(
        min_pairs=min_pairs,
        min_per_bucket=min_per_bucket,
        max_failure_rate=max_failure_rate,
        against=against,
    )
    with _open(registry, store) as reg:
        version = reg.promote(
            ref,
            alias,
            force=force,
            reason=reason,
            by=by,
            when_shadow_passes=when_shadow_passes,
            shadow=criteria,
        )
    if fmt == Format.json:
        emit_json(version.model_dump(mode="json"))
        return
    _print(render_promoted(version, alias, forced=force and not version.passed))


@registry_app.command("shadow-report")
@handles_errors
def shadow_report_command(
    ref: Annotated[
        str,
        typer.Argument(
            help="The candidate: NAME@ALIAS (NAME@candidate) or NAME@NUMBER.", show_default=False
        ),
    ],
    against: Annotated[
        str,
        typer.Option("--against", help="The champion's alias the candidate is judged against."),
    ] = "champion",
    min_pairs: MinPairsOpt = 1000,
    min_per_bucket: MinPerBucketOpt = 30,
    max_failure_rate: MaxFailureRateOpt = 0.0,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Also write the report as a self-contained HTML page (atomically).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    registry: RegistryOpt = None,
    store: StoreOpt = None,
    fmt: FormatOpt = Format.text,
) -> None:
    """The verdict of live traffic on a candidate shadowed beside the champion.

    `onnxgate serve NAME@champion --shadow NAME@candidate` judges a sample of requests on the
    candidate with its contract's output rules and records them here. The verdict sums every
    shadow run of the candidate against the version --against names now: FAILED when an output
    failed its rule on more requests than --max-failure-rate allows (naming output, rule and
    count), INCONCLUSIVE with fewer than --min-pairs requests, a shape bucket traffic reached
    below --min-per-bucket, or runs only against an earlier champion; else PASSED. The worst
    requests are shown by input sha256 (inputs are kept only if the server was allowed to).

    For example:

        onnxgate registry shadow-report bert@candidate

        onnxgate registry shadow-report bert@7 --min-pairs 5000 --json --html shadow.html

    Exit codes: 0 passed · 1 failed or inconclusive (JSON `verdict.status` tells which; promote --when-shadow-passes refuses both) · 2 bad reference, unknown alias or criterion · 3 the registry cannot be reached.
    """
    from onnxgate.gate import write_shadow_html
    from onnxgate.registry import render_shadow

    with _open(registry, store, read_only=True) as reg:
        report = reg.shadow_report(
            ref,
            min_pairs=min_pairs,
            min_per_bucket=min_per_bucket,
            max_failure_rate=max_failure_rate,
            against=against,
        )
    if html is not None:
        write_shadow_html(report, html)
    if fmt == Format.json or as_json:
        emit_json(report.model_dump(mode="json") | {"passed": report.passed})
    else:
        _print(render_shadow(report))
    finish(report.passed)


@registry_app.command("fetch")
@handles_errors
def fetch_command(
    ref: Annotated[
        str,
        typer.Argument(help="NAME@ALIAS, NAME@NUMBER or NAME (the latest).", show_default=False),
    ],
    out_dir: Annotated[
        Path,
        typer.Option("--out", "-o", help="Folder to write into (created).", show_default=False),
    ],
    registry: RegistryOpt = None,
    store: StoreOpt = None,
    fmt: FormatOpt = Format.text,
) -> None:
    """Write a version's model, contract and golden samples into a folder, checking each sha256.

    Files are named NAME.onnx, NAME.contract.json and NAME.golden.npz (NAME.int8.onnx,
    NAME.fp16.onnx ... for a quantised variant), so `onnxgate verify OUT/NAME.onnx` runs on them as they are. Each file
    is checked against the registry's sha256 while copied and again after it is written; a
    damaged artefact is exit 1.

    For example:

        onnxgate registry fetch bert@champion --out deploy/

        onnxgate verify deploy/bert.onnx

    Exit codes: 0 fetched and checked · 1 an artefact's bytes are not the ones recorded · 2 bad reference · 3 the registry cannot be reached.
    """
    from onnxgate.registry import render_fetch

    with _open(registry, store, read_only=True) as reg:
        result = reg.fetch(ref, out_dir)
    if fmt == Format.json:
        emit_json(result.model_dump(mode="json"))
        return
    _print(render_fetch(result))


@registry_app.command("fsck")
@handles_errors
def fsck_command(
    remove: Annotated[
        bool,
        typer.Option(
            "--remove",
            help="Remove orphan blobs and temporary files older than --min-age.",
        ),
    ] = False,
    min_age: Annotated[
        float,
        typer.Option(
            "--min-age",
            help="Seconds a leftover must be old before --remove takes it; protects "
            "registrations in progress.",
            min=0,
        ),
    ] = 3600.0,
    no_hash: Annotated[
        bool,
        typer.Option("--no-hash", help="Check blob sizes only, not their sha256 (faster)."),
    ] = False,
    registry: RegistryOpt = None,
    store: StoreOpt = None,
    fmt: FormatOpt = Format.text,
) -> None:
    """Check the registry: every version whole, every blob it names present and intact.

    Inconsistencies (exit 1): a version naming a missing, truncated or changed blob; a version
    with fewer artefact rows than it was registered with, or without its gate run; a gap in a
    model's version numbers; an alias pointing at no version of its model. Reported without
    failing: orphan blobs (a registration killed before its commit, or one in progress) and
    temporary files (a write a kill interrupted); --remove deletes those older than --min-age.

    For example:

        onnxgate registry fsck

        onnxgate registry fsck --remove --min-age 600 --format json

    Exit codes: 0 consistent · 1 inconsistent (a version names a missing or damaged blob) · 3 the registry cannot be reached.
    """
    from onnxgate.registry import render_fsck

    with _open(registry, store, read_only=True) as reg:
        report = reg.fsck(remove=remove, min_age=min_age, rehash=not no_hash)
    if fmt == Format.json:
        emit_json(report.model_dump(mode="json"))
    else:
        _print(render_fsck(report))
    finish(report.consistent)


publish_app = typer.Typer(
    name="publish",
    help=(
        "Publish a gated version to another registry, the one your team already runs.\n\n"
        "`mlflow`: an MLflow tracking server's model registry."
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)
registry_app.add_typer(publish_app, name="publish")


@publish_app.command("mlflow")
@handles_errors
def publish_mlflow_command(
    ref: Annotated[
        str,
        typer.Argument(
            help="The version to publish: NAME@NUMBER, NAME@ALIAS or NAME (the latest).",
            show_default=False,
        ),
    ],
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            "--tracking-uri",
            help="The MLflow tracking server (http://host:5000; credentials as "
            "http://user:password@host are masked in every output). Default: "
            "$MLFLOW_TRACKING_URI.",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="The registered model's name in MLflow. Default: the version's name.",
            show_default=False,
        ),
    ] = None,
    alias: Annotated[
        str,
        typer.Option(
            "--alias",
            help="The MLflow alias to point at the published version; moved only when its "
            "gate passed.",
        ),
    ] = "champion",
    no_alias: Annotated[
        bool,
        typer.Option(
            "--no-alias",
            help="Publish without moving an alias (the one way to publish a failed version).",
        ),
    ] = False,
    experiment: Annotated[
        str,
        typer.Option("--experiment", help="The MLflow experiment of the run that logs the model."),
    ] = "onnxgate",
    registry: RegistryOpt = None,
    store: StoreOpt = None,
    fmt: FormatOpt = Format.text,
) -> None:
    """Publish a gated version to an MLflow tracking server, as an ONNX-flavour model version.

    The model is logged with the ONNX flavour (mlflow.pyfunc loads it), with its contract,
    golden samples, report.json and report.html as the model's extra files, every figure of the
    gate as a run metric (bench.p50_ms, verify.installed.passed …) and its provenance as tags
    (onnxgate.ref, onnxgate.model_sha256, onnxgate.source …); then it is registered as a version
    of the MLflow model and --alias is pointed at it. A version whose gate did not pass is
    refused an alias (exit 1, nothing is sent); publish it with --no-alias.

    Publishing the same version again finds it by its tags: no second MLflow version is made,
    and the alias is pointed at it again. `onnxgate serve mlflow:/models/NAME@ALIAS` serves it.

    For example:

        onnxgate registry publish mlflow bert@champion --tracking-uri http://mlflow:5000

        onnxgate registry publish mlflow bert@7 --alias staging --name bert-onnx --format json

    Exit codes: 0 published · 1 refused (the version's gate did not pass and an alias was asked) · 2 bad reference or unknown version · 3 the registry or the MLflow server cannot be reached, or the mlflow extra is missing.
    """
    from onnxgate.gate import publish_version

    with _open(registry, store, read_only=True) as reg:
        publication = publish_version(
            reg,
            ref,
            tracking_uri,
            name=name,
            alias=None if no_alias else alias,
            experiment=experiment,
        )
    if fmt == Format.json:
        emit_json(publication.model_dump(mode="json") | {"uri": publication.uri})
        return
    _print(_published_lines(publication))


def _published_lines(publication: MlflowPublication) -> list[str]:
    p = publication
    made = "published" if p.created else "already published"
    lines = [f"{made}: {p.source} as {p.uri} on {p.tracking_uri} (run {p.run_id})"]
    if p.alias_moved:
        before = f" (was version {p.previous})" if p.previous not in (None, p.version) else ""
        lines.append(f"{p.name}@{p.alias} -> version {p.version}{before}")
    else:
        lines.append("no alias moved")
    return lines
