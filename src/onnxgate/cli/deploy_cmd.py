"""``onnxgate deploy triton|check|kserve|mobile|web``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from onnxgate.cli._common import FORMAT_HELP, Format, handles_errors, run
from onnxgate.cli._flags import flag_option
from onnxgate.cli._options import OpsLibraryOpt, build
from onnxgate.web import WEB_RELEASE  # gate's config imports it too: no cost at start

deploy_app = typer.Typer(
    name="deploy",
    help=(
        "Deploy a gated model on the engines teams already run, and check such deployments.\n\n"
        "`deploy triton` writes a Triton model repository from a registry version or a model "
        "with its contract: the model, `config.pbtxt` built from what the gate proved (inputs "
        "and outputs, the batch axis and its proven range, tuned settings, TensorRT profiles "
        "with `--gpu`) and warm-up data from the golden samples, then checks it. `deploy check` "
        "runs the same checks on any repository, written by hand or not. `deploy mobile` writes "
        "ONNX Runtime's ORT format for mobile and minimal builds, proven on the golden samples "
        "and held to edge budgets. `deploy web` writes what a web app loads (the model, its input "
        "spec as JSON) and proves it on onnxruntime-web in a headless Chromium.\n\n"
        "Exit codes: 0 the repository agrees with its models · 1 a check failed · 2 bad input "
        "(unknown reference, a batch beyond the proven one, an existing version) · 3 the "
        "`deploy` extra is missing."
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)

FormatOpt = Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)]
RegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        help="Registry URL; default $ONNXGATE_REGISTRY or the local one.",
        show_default=False,
    ),
]
StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Artefact store: a folder or s3://BUCKET/PREFIX (default: $ONNXGATE_STORE).",
        show_default=False,
    ),
]
AllowUngatedOpt = Annotated[
    bool, typer.Option("--allow-ungated", help="Deploy a version whose gate did not pass.")
]
RefArg = Annotated[
    str,
    typer.Argument(
        help="A registry reference (NAME@ALIAS, NAME@3, NAME:3, NAME) or a model file with "
        "its contract.",
        show_default=False,
    ),
]
TRITON = "Triton"
MOBILE = "Edge budgets"
GPU = "GPU (CUDA and TensorRT)"


@deploy_app.command("triton")
@handles_errors
def triton_command(
    ref: RefArg,
    out: Annotated[
        Path,
        typer.Option(
            "--out", "-o", help="The model repository (created if missing).", show_default=False
        ),
    ],
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="Name in the repository; default the registry name or file stem.",
            show_default=False,
        ),
    ] = None,
    version: Annotated[
        int | None,
        typer.Option(
            "--version",
            help="Version folder; default the registry version, or one past the highest.",
            show_default=False,
        ),
    ] = None,
    max_batch: Annotated[
        int | None,
        typer.Option(
            "--max-batch",
            help="max_batch_size; default the largest batch the contract proves (a larger one is refused).",
            show_default=False,
            rich_help_panel=TRITON,
        ),
    ] = None,
    max_queue_delay_us: Annotated[
        int,
        typer.Option(
            "--max-queue-delay-us",
            help="Dynamic batching: longest wait for a batch to fill.",
            rich_help_panel=TRITON,
        ),
    ] = 1000,
    max_queue: Annotated[
        int,
        typer.Option(
            "--max-queue",
            help="Requests queued before Triton rejects (0: no limit).",
            rich_help_panel=TRITON,
        ),
    ] = 0,
    instances: Annotated[
        int, typer.Option("--instances", help="Model instances per device.", rich_help_panel=TRITON)
    ] = 1,
    versions: Annotated[
        str,
        typer.Option(
            "--versions",
            help="version_policy: serve the latest version only, or all of them.",
            rich_help_panel=TRITON,
        ),
    ] = "latest",
    gpu: Annotated[
        bool,
        typer.Option(
            "--gpu",
            help="Run on GPUs: CUDA with TensorRT, engine cache and shape profiles from the proven ranges.",
            rich_help_panel=GPU,
        ),
    ] = False,
    precision: Annotated[
        str,
        typer.Option(
            "--precision",
            help="TensorRT precision: FP32 (what the gate judged), FP16 or INT8.",
            rich_help_panel=GPU,
        ),
    ] = "FP32",
    workspace_mb: Annotated[
        int, typer.Option("--workspace-mb", help="TensorRT builder workspace.", rich_help_panel=GPU)
    ] = 2048,
    engine_cache: Annotated[
        str | None,
        typer.Option(
            "--engine-cache",
            help="Where TensorRT keeps built engines (mount a volume there so restarts reuse them); default /tmp/onnxgate-trt/NAME/VERSION.",
            show_default=False,
            rich_help_panel=GPU,
        ),
    ] = None,
    ops_libraries: Annotated[
        list[str] | None,
        flag_option(
            "ops_libraries",
            "--ops-library",
            help="A custom operator library (PATH of a shared library, or onnxruntime-extensions), "
            "repeatable: the file of a library the contract requires (its sha256 must be the "
            "contract's; the installed onnxruntime-extensions is found unnamed), or another to "
            "deploy. Copied into the version folder and named in model_operations.",
            metavar="PATH|onnxruntime-extensions",
            show_default=False,
            rich_help_panel=TRITON,
        ),
    ] = None,
    repository_path: Annotated[
        str | None,
        flag_option(
            "repository_path",
            "--repository-path",
            help="The repository's absolute path as the Triton server sees it (a container's "
            "mount point, /models): model_operations names libraries by it. Default: --out's.",
            show_default=False,
            rich_help_panel=TRITON,
        ),
    ] = None,
    registry: RegistryOpt = None,
    store: StoreOpt = None,
    allow_ungated: AllowUngatedOpt = False,
    fmt: FormatOpt = Format.text,
) -> None:
    """Write REF into a Triton model repository, then check it as `deploy check` does.

    Layout: `OUT/NAME/VERSION/model.onnx` (with external data, the contract and golden file),
    `OUT/NAME/config.pbtxt`, `OUT/NAME/warmup/*.bin`. The config is built as Triton's
    `ModelConfig` message: platform `onnxruntime_onnx`; `max_batch_size` from the batch axis the
    contract proves (0 without one); inputs and outputs with Triton datatypes and dims (`-1`
    where symbolic); dynamic batching; an instance group; the tuned ONNX Runtime settings as
    backend parameters; one `model_warmup` per golden sample, so Triton does not call the model
    ready until it has run on them. Custom operator libraries the contract requires (or
    --ops-library names) are copied into the version folder and named in `model_operations`.
    Other versions in the repository are kept.

    Example: `onnxgate deploy triton minilm@champion -o models/` · `onnxgate deploy triton
    model.onnx -o models/ --gpu --precision FP16`

    Exit codes: 0 written and checked · 1 not gated (see --allow-ungated), or the check found
    errors in what was written · 2 bad input (a batch beyond the proven one, an existing
    version, a tensor Triton cannot describe) · 3 the `deploy` extra is missing.
    """
    from onnxgate.deploy import TritonConfig, deploy_triton, render_triton

    config = build(
        TritonConfig,
        out=out, name=name, version=version, registry=registry, store=store,
        allow_ungated=allow_ungated, max_batch=max_batch, max_queue_delay_us=max_queue_delay_us,
        max_queue=max_queue, instances=instances, gpu=gpu, precision=precision.upper(),
        workspace_mb=workspace_mb, engine_cache=engine_cache, versions=versions,
        ops_libraries=tuple(ops_libraries or ()), repository_path=repository_path,
    )  # fmt: skip
    run(fmt, lambda progress: deploy_triton(ref, config, progress=progress), render_triton)


@deploy_app.command("check")
@handles_errors
def check_command(
    repository: Annotated[
        Path,
        typer.Argument(
            help="A Triton model repository, or one model folder in it.", show_default=False
        ),
    ],
    fmt: FormatOpt = Format.text,
) -> None:
    """Check a Triton model repository against its ONNX models (and their contracts).

    Every `config.pbtxt` is parsed with Triton's `model_config_pb2`, then held against each
    version's model: names, datatypes, ranks and fixed dims of inputs and outputs, the batch
    axis `max_batch_size` implies (DPL013: the batch dim counted twice), and every warm-up's
    inputs, dims and data files. With the model's onnxgate contract beside it, also
    `max_batch_size` and warm-up shapes inside the proven ranges, and the model the one the
    contract describes. Each finding has a rule code (DPL001 ...).

    Exit codes: 0 every config agrees with its model · 1 a finding of severity error · 2 not a
    folder · 3 the `deploy` extra is missing.
    """
    from onnxgate.deploy import check_repository, render_check

    run(fmt, lambda progress: check_repository(repository), render_check)


@deploy_app.command("kserve")
@handles_errors
def kserve_command(
    ref: Annotated[
        str,
        typer.Argument(
            help="The model deployed with `deploy triton` (a registry reference or a model file).",
            show_default=False,
        ),
    ],
    storage_uri: Annotated[
        str,
        typer.Option(
            "--storage-uri",
            help="Where the cluster reads the Triton repository (s3://bucket/models, "
            "gs://..., pvc://claim/models).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Write the manifest (YAML) here.", show_default=False),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="InferenceService name; default the model's, lowercased.",
            show_default=False,
        ),
    ] = None,
    model_name: Annotated[
        str | None,
        typer.Option(
            "--model-name",
            help="The model's folder in the repository; default the registry name or file stem.",
            show_default=False,
        ),
    ] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", help="Kubernetes namespace.", show_default=False)
    ] = None,
    runtime: Annotated[
        str, typer.Option("--runtime", help="KServe serving runtime (Triton).")
    ] = "kserve-tritonserver",
    cpu: Annotated[str, typer.Option("--cpu", help="CPU request and limit.")] = "1",
    memory: Annotated[str, typer.Option("--memory", help="Memory request and limit.")] = "2Gi",
    gpus: Annotated[int, typer.Option("--gpus", help="nvidia.com/gpu limit.")] = 0,
    min_replicas: Annotated[int, typer.Option("--min-replicas")] = 1,
    max_replicas: Annotated[int | None, typer.Option("--max-replicas", show_default=False)] = None,
    registry: RegistryOpt = None,
    store: StoreOpt = None,
    allow_ungated: AllowUngatedOpt = False,
    fmt: FormatOpt = Format.text,
) -> None:
    """A KServe InferenceService serving the Triton repository `deploy triton` wrote.

    Built with KServe's own typed models (`V1beta1InferenceService`, the Kubernetes client's
    `V1ObjectMeta`, `V1ResourceRequirements`, `V1Probe`) and serialised by KServe's API
    client: the Triton runtime with protocol v2, the storage URI, requests and limits (GPUs as
    `nvidia.com/gpu`), replicas, and a readiness probe on Triton's
    `/v2/models/NAME/ready`, which stays false until the model's warm-ups have run. The
    annotations name the source, its sha256 and its gate.

    Example: `onnxgate deploy triton minilm@champion -o models/ && onnxgate deploy kserve
    minilm@champion --storage-uri s3://bucket/models -o minilm.yaml`

    Exit codes: 0 built · 1 not gated (see --allow-ungated) · 2 a name or value KServe's types
    refuse · 3 the `kserve` extra is missing.
    """
    from onnxgate.deploy import KServeConfig, deploy_kserve, render_kserve

    config = build(
        KServeConfig,
        storage_uri=storage_uri, out=out, name=name, model_name=model_name, namespace=namespace,
        runtime=runtime, cpu=cpu, memory=memory, gpus=gpus, min_replicas=min_replicas,
        max_replicas=max_replicas, registry=registry, store=store, allow_ungated=allow_ungated,
    )  # fmt: skip
    run(fmt, lambda progress: deploy_kserve(ref, config, progress=progress), render_kserve)


@deploy_app.command("mobile")
@handles_errors
def mobile_command(
    ref: RefArg,
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="A new or empty folder.", show_default=False),
    ],
    optimization_style: Annotated[
        str,
        flag_option(
            "optimization_style",
            "--optimization-style",
            help="Fixed: every optimisation baked in (CPU). Runtime: some saved to replay at "
            "load (NNAPI, CoreML).",
        ),
    ] = "Fixed",
    enable_type_reduction: Annotated[
        bool,
        flag_option(
            "enable_type_reduction",
            "--enable-type-reduction",
            help="List the types each operator needs in the config (a smaller minimal build).",
        ),
    ] = False,
    budget: Annotated[
        float,
        typer.Option(
            "--budget",
            help="Seconds of timed single-thread runs per golden sample.",
            rich_help_panel=MOBILE,
        ),
    ] = 1.0,
    max_size_mb: Annotated[
        float | None,
        flag_option(
            "max_size_mb",
            "--max-size-mb",
            help="Fail when the .ort file is larger (MB).",
            show_default=False,
            rich_help_panel=MOBILE,
        ),
    ] = None,
    max_peak_rss_mb: Annotated[
        float | None,
        flag_option(
            "max_peak_rss_mb",
            "--max-peak-rss-mb",
            help=(
                "Fail when the model's share of the peak resident memory running the golden "
                "samples (the peak less the worker's before the session) is above (MB)."
            ),
            show_default=False,
            rich_help_panel=MOBILE,
        ),
    ] = None,
    max_p50_ms: Annotated[
        float | None,
        flag_option(
            "max_p50_ms",
            "--max-p50-ms",
            help="Fail when a golden sample's single-thread p50 is above (ms); undecided when "
            "other load spoiled the timings.",
            show_default=False,
            rich_help_panel=MOBILE,
        ),
    ] = None,
    ops_library: OpsLibraryOpt = None,
    registry: RegistryOpt = None,
    store: StoreOpt = None,
    allow_ungated: AllowUngatedOpt = False,
    fmt: FormatOpt = Format.text,
) -> None:
    """Write REF in ONNX Runtime's ORT format, prove it on the golden samples, measure it.

    ONNX Runtime's own converter (`python -m onnxruntime.tools.convert_onnx_models_to_ort`)
    writes `OUT/NAME.ort` and `OUT/NAME.required_operators.config` (the operators a minimal
    build needs: `--include_ops_by_config`). The `.ort` file is then loaded by ONNX Runtime
    and runs the contract's golden samples, judged by the contract's own rules. A fresh worker
    process loads it with one intra-op thread and runs the golden samples: its peak resident
    memory and each sample's p50 are reported, with the sizes of the `.onnx` and `.ort` files,
    and held to the budgets given. A model with custom operators is converted, proven and timed
    with the custom operator library its contract records (or --ops-library names; the converter
    registers one).

    Example: `onnxgate deploy mobile model.onnx -o mobile/ --max-size-mb 5 --max-p50-ms 20`

    Exit codes: 0 written, proven and within its budgets (a p50 budget undecided because other
    load spoiled the timings is reported INCONCLUSIVE and exits 0, as the gate's
    `on_unreliable = "warn"`) · 1 not gated (see --allow-ungated), the `.ort` file breaks
    the contract, a budget missed, or ONNX Runtime cannot load the model (the node and operator
    named) · 2 bad input (OUT not empty, an unknown reference).
    """
    from onnxgate.deploy import MobileDeployConfig, deploy_mobile
    from onnxgate.mobile import render_mobile

    config = build(
        MobileDeployConfig,
        out=out, optimization_style=optimization_style,
        enable_type_reduction=enable_type_reduction, budget=budget, max_size_mb=max_size_mb,
        max_peak_rss_mb=max_peak_rss_mb, max_p50_ms=max_p50_ms, registry=registry, store=store,
        allow_ungated=allow_ungated, ops_libraries=tuple(ops_library or ()),
    )  # fmt: skip
    run(
        fmt,
        lambda progress: deploy_mobile(ref, config, progress=progress),
        render_mobile,
        passed=lambda report: report.passed or report.inconclusive,
    )


@deploy_app.command("web")
@handles_errors
def web_command(
    ref: RefArg,
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="A new or empty folder.", show_default=False),
    ],
    ort: Annotated[
        bool,
        typer.Option(
            "--ort",
            help="Write ONNX Runtime's ORT format (NAME.ort, with its required-operators "
            "config) instead of NAME.onnx.",
        ),
    ] = False,
    runtime: Annotated[
        str,
        typer.Option(
            "--runtime", "-r", help="The browser runtime that proves it: onnxruntime-web==X.Y.Z."
        ),
    ] = f"onnxruntime-web=={WEB_RELEASE}",
    threads: Annotated[
        int, typer.Option("--threads", help="wasm threads the proof runs with.")
    ] = 1,
    registry: RegistryOpt = None,
    store: StoreOpt = None,
    allow_ungated: AllowUngatedOpt = False,
    fmt: FormatOpt = Format.text,
) -> None:
    """Write REF for a web app and prove it in the browser, on onnxruntime-web.

    Into OUT (new or empty): `NAME.onnx` (or `NAME.ort` with `--ort`), `NAME.inputs.json` (the
    contract's inputs: names, dtypes as `ort.Tensor` takes them, shapes with symbolic dims by
    name and the range each was proven at; the outputs) and `NAME.proof.json`: the contract's
    golden samples run on the written file in onnxruntime-web (wasm backend) in a headless
    Chromium, judged by the contract's own rules, with the size, runtime, backend and threads
    that really ran. Written only when the proof passes.

    Example: `onnxgate deploy web model.onnx -o web/` · `onnxgate deploy web minilm@champion -o
    web/ --ort --threads 2`

    Exit codes: 0 written and proven · 1 not gated (see --allow-ungated), or the browser breaks
    the contract (the output and its figure named; nothing written) or cannot load the model ·
    2 bad input (OUT not empty, an unknown reference) · 3 Node.js, npm or Chromium missing.
    """
    from onnxgate.deploy import WebConfig, deploy_web
    from onnxgate.web import render_web

    config = build(
        WebConfig,
        out=out, format="ort" if ort else "onnx", runtime=runtime, threads=threads,
        registry=registry, store=store, allow_ungated=allow_ungated,
    )  # fmt: skip
    run(fmt, lambda progress: deploy_web(ref, config, progress=progress), render_web)
