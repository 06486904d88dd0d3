"""``gate.toml``: a strict, versioned description of one deployment gate.

The file names the model's source, the targets it must run on, the steps with their settings and
thresholds, and where a passing version is registered. Every table is a frozen pydantic model that
refuses unknown keys, and a mistake is reported with the key's path (``steps.bench.runz``), so a
typo can never turn a threshold off silently.
"""

from __future__ import annotations

import re
import tomllib
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from onnxgate._opslib import PACKAGES, library_spec
from onnxgate._words import gate_words, speaking
from onnxgate.errors import ConfigError
from onnxgate.settings import (
    FeedSettings,
    Part,
    SessionSettings,
    Tolerances,
    config_hash,
    field_path,
)
from onnxgate.web import WEB_RELEASE

CONFIG_VERSION = 1
"""The version of the file format this onnxgate reads (``version = 1`` at the top)."""

MAX_CONFIG_BYTES = 1 << 20
"""The largest ``gate.toml`` read (1 MiB): the demo's is 3 KB, and a larger file is a mistake."""
MAX_DEPTH = 32
"""The deepest nesting of tables and arrays accepted; no key nests more than six levels."""
MAX_INT = (1 << 63) - 1
"""The largest integer magnitude accepted: what TOML itself promises (64-bit)."""
SHOWN = 200
"""Characters of a refused value or key path shown in a message (also where a library's own
message quotes the value)."""
MESSAGE = 1000
"""Characters of one refusal's explanation: the library's words are kept whole up to here."""

SourceKind = Literal["onnx", "torch", "sklearn", "tf", "keras"]


class ModelSection(Part):
    """``[model]``: what the gate judges and the name it is registered under."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    """The registry's name of the model (letters, digits, ``.``, ``_``, ``-``)."""
    source: str
    """An ``.onnx`` file, ``torch:package.module:factory``, ``sklearn:estimator.joblib``,
    ``tf:saved_model_folder`` (or a Keras file), or ``keras:model.keras``."""
    dynamic: list[str] = []
    """torch: dynamic axes as ``INPUT:AXIS=LABEL`` (``input_ids:0=batch``); tf/keras: labels
    of the model's dynamic (None) axes (``tokens:1=seq``)."""
    output_names: list[str] = []
    """torch: names of the exported outputs."""
    example_inputs: Path | None = None
    """torch: an .npz of example inputs when the factory does not return them; tf/keras: an
    .npz whose shapes and value ranges (token ids) seed the parity inputs."""
    opset: int | None = None
    """torch/sklearn/tf/keras: the opset to export at (default: the exporter's, 17 for tf/keras,
    capped by the runtimes)."""
    paths: list[Literal["tf2onnx-keras", "tf2onnx-saved-model", "keras-onnx"]] = []
    """tf/keras: the conversion paths to try (default: every one that applies); the one closest
    to TensorFlow is kept."""
    custom_objects: list[Path] = []
    """tf/keras: Python files defining and registering the model's custom Keras layers."""
    tf_version: str | None = None
    """tf/keras: the tensorflow-cpu release of TensorFlow's isolated environment."""
    tf2onnx_version: str | None = None
    """tf/keras: the tf2onnx release of that environment."""
    keras_version: str | None = None
    """tf/keras: the Keras release of that environment."""
    exporter: Literal["dynamo", "torchscript", "auto"] = "dynamo"
    """torch: which ``torch.onnx`` exporter; ``auto`` tries dynamo, then TorchScript."""
    data: Path | None = None
    """sklearn: the rows (.npz, .npy or .csv) the conversion is proved on."""
    trust_pickle: bool = False
    """sklearn: load a pickled estimator (runs code from the file; only for files you made)."""
    dtype: Literal["float32", "float64"] | None = None
    """sklearn: the inputs' element type (default ``float32``, what ONNX Runtime's ML operators
    compute in); ``float64`` keeps scikit-learn's precision, where every operator has a double
    kernel."""
    batch_axis: str | None = None
    """.onnx: the inputs' batch dimension when the outputs name their first axis otherwise
    (tf2onnx writes ``unk__214`` on inputs and ``unk__215`` on outputs); the contract records
    it, so ``serve`` batches requests along it and ``deploy triton`` sets ``max_batch_size``."""
    root: Path | None = None
    """The folder ``torch:package.module:factory`` entry points (the source,
    ``steps.compare.against``, ``steps.bench.vs``) are imported from before installed packages
    (default: the config's folder)."""

    @property
    def kind(self) -> SourceKind:
        """Which exporter, if any, turns the source into ONNX."""
        if self.source.startswith("torch:"):
            return "torch"
        if self.source.startswith("sklearn:"):
            return "sklearn"
        if self.source.startswith("tf:"):
            return "tf"
        if self.source.startswith("keras:"):
            return "keras"
        return "onnx"

    @property
    def location(self) -> str:
        """The source without its ``torch:``/``sklearn:``/``tf:``/``keras:`` prefix."""
        return self.source.split(":", 1)[1] if self.kind != "onnx" else self.source

    @model_validator(mode="after")
    def _source(self) -> ModelSection:
        if self.kind == "onnx" and not self.source.endswith(".onnx"):
            raise ValueError(
                f"source {self.source!r} is not an .onnx file, torch:package.module:factory, "
                "sklearn:estimator.joblib, tf:saved_model_folder or keras:model.keras"
            )
        if self.kind == "sklearn" and self.data is None:
            raise ValueError("an sklearn source needs data = 'rows.npz' to prove the conversion on")
        if self.kind != "sklearn" and self.dtype is not None:
            raise ValueError("dtype applies to sklearn sources (the type of the exported inputs)")
        tf = self.kind in ("tf", "keras")
        if self.kind != "torch" and self.output_names:
            raise ValueError("output_names applies to torch sources only")
        if self.kind != "torch" and not tf and (self.dynamic or self.example_inputs):
            raise ValueError("dynamic and example_inputs apply to torch, tf and keras sources")
        tf_keys = [
            k
            for k in ("paths", "custom_objects", "tf_version", "tf2onnx_version", "keras_version")
            if getattr(self, k)
        ]
        if tf_keys and not tf:
            raise ValueError(f"{', '.join(tf_keys)} apply to tf and keras sources only")
        if self.kind != "onnx" and self.batch_axis is not None:
            raise ValueError(
                "batch_axis applies to .onnx sources; an export names its own dims (dynamic)"
            )
        return self


class FeedsSection(Part):
    """``[feeds]``: the data and the serving ranges of the whole gate.

    Every step uses it unless its own ``feeds`` table sets something. ``export`` proves the
    ranges (the contract's golden samples take each dimension to both ends and between) and the
    steps after it run on those golden samples, so ``serve`` and ``deploy`` accept exactly the
    sizes proven.
    """

    inputs: Path | None = None
    """Real data: .npz, JSON, .pb, or test_data_set folders (relative to this file). With it the
    golden samples are the data's, plus copies resized to the ends of ``dims``."""
    dims: dict[str, list[Annotated[int, Field(ge=1)]]] = {}
    """The serving range of a symbolic dimension: ``[min, max]``, or ``[size]`` (or ``size``) for
    exactly one size; ``images[2]`` names a dimension without a name. Dimensions left out get a
    starter range by role: batch 1..32, image sides from the planned size to 640, token
    positions 1..512."""
    ranges: dict[str, str] = {}
    """Values per input for synthetic feeds: ``"LOW:HIGH"`` (HIGH excluded) or ``"VALUE"``."""
    seed: int = Field(0, ge=0)
    """The seed of synthetic feeds: the same seed, the same values."""

    @field_validator("dims", mode="before")
    @classmethod
    def _one_size(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: [v] if isinstance(v, int) else v for k, v in value.items()}
        return value

    @field_validator("dims")
    @classmethod
    def _ranges_of_dims(cls, value: dict[str, list[int]]) -> dict[str, list[int]]:
        for name, sizes in value.items():
            if len(sizes) not in (1, 2) or sizes[0] > sizes[-1]:
                raise ValueError(f"{name} = {sizes} is not [MIN, MAX] with MIN <= MAX, or [SIZE]")
        return value

    @field_validator("ranges", mode="before")
    @classmethod
    def _ranges(cls, value: Any) -> Any:
        # the same forms as a step's feeds.ranges, validated by the same code
        if not isinstance(value, dict):
            return value
        try:
            return FeedSettings(ranges=value).ranges
        except ValidationError as error:
            raise ValueError(error.errors()[0]["msg"].removeprefix("Value error, ")) from None

    def bounds(self) -> dict[str, tuple[int, int]]:
        """``dims`` as (min, max) per dimension."""
        return {name: (sizes[0], sizes[-1]) for name, sizes in self.dims.items()}

    def golden(self) -> FeedSettings:
        """The settings the golden samples are made from (``dims`` as its two ends).

        With ``inputs`` the golden samples are the data's, so value ranges (which shape
        synthetic feeds, for steps that time other shapes) are left out.
        """
        return FeedSettings(
            inputs=self.inputs,
            dims={name: sorted({low, high}) for name, (low, high) in self.bounds().items()},
            ranges=self.ranges if self.inputs is None else {},
            seed=self.seed,
        )


def _runtime_spec(text: str) -> str:
    """A runtime the gate can install and run (``RuntimeSpec.parse``), checked on load.

    A mistyped one is named with its key, not found after the other steps ran.
    """
    from onnxgate.runners.runtimes import RuntimeSpec

    try:
        RuntimeSpec.parse(text)
    except ConfigError as error:
        raise ValueError(f"{error.message} {error.hint or ''}".strip()) from None
    return text


RuntimeText = Annotated[str, AfterValidator(_runtime_spec)]
"""``installed``, ``X.Y.Z`` or ``PACKAGE==X.Y.Z`` of a registered runtime package."""


def _web_runtime(text: str) -> str:
    """A release of ``onnxruntime-web`` (``web_runtime``), checked on load like ``RuntimeText``."""
    from onnxgate.web import web_runtime

    try:
        with speaking(partial(gate_words, step="web")):
            web_runtime(text)
    except ConfigError as error:
        raise ValueError(f"{error.message} {error.hint or ''}".strip()) from None
    return text


class TargetsSection(Part):
    """``[targets]``: where the model must run."""

    runtimes: list[RuntimeText] = ["installed"]
    """``installed`` and/or releases or packages (``onnxruntime==1.20.1``,
    ``onnxruntime-openvino==1.24.1``), each installed once into an isolated environment."""
    providers: list[str] = []
    """Execution providers in preference order; CPU is appended."""
    ops_libraries: list[str] = []
    """Custom operator libraries every step's sessions register, in order: shared-library paths
    (relative to this file) or ``onnxruntime-extensions``; the contract records each one's name,
    version and sha256."""

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # left out when none, so the config hash (and cached steps) of gates without them stay
        data = handler(self)
        if not self.ops_libraries and isinstance(data, dict):
            data.pop("ops_libraries", None)
        return data


class Step(Part):
    """What every step table has."""

    enabled: bool = True
    """Run this step; a disabled step is reported as not run (``disabled in the config``)."""


class CheckStep(Step):
    """``[steps.check]``: static checks against every target runtime."""

    ignore: list[str] = []
    """Rule codes to ignore (``SHP001``)."""
    fail_on: Literal["error", "warning", "info"] = "error"
    """The lowest severity of finding that fails the step."""


class ExportStep(Step):
    """``[steps.export]``: parity of the export (torch/sklearn) or the golden samples (.onnx)."""

    tolerances: Tolerances = Tolerances()
    """How outputs are judged: the export's parity with the source (torch/sklearn), and the
    rules the contract records for its golden samples."""

    feeds: FeedSettings = FeedSettings()
    """For an .onnx source: the golden samples' feeds, instead of ``[feeds]`` (``dims`` here
    are ranges too: each dimension is proven from its smallest to its largest size)."""
    reference: str = "reference"
    """For an .onnx source: who computes the golden outputs."""
    second_opinion: bool = True
    """For an .onnx source: have a second runner that shares no code with ``reference`` confirm
    the golden outputs (ONNX Runtime with optimisations off, or the reference evaluator when
    ``reference`` is ONNX Runtime); false for models the second runner cannot run (recorded)."""


class CompareStep(Step):
    """``[steps.compare]``: ONNX Runtime (as deployed) against a reference."""

    tolerances: Tolerances = Tolerances()
    """How each output is judged against the reference."""

    against: str = "reference"
    """``reference``, ``ort:disable``, ``torch:package.module:factory`` or another .onnx file."""
    feeds: FeedSettings = FeedSettings()
    """Feeds instead of the contract's golden samples (the default: the sizes proven)."""
    session: SessionSettings = SessionSettings()
    """The candidate's ONNX Runtime session (providers default to ``targets.providers``)."""
    localize: bool = True
    """On a miss, find the first diverging node and replay it."""


class VerifyStep(Step):
    """``[steps.verify]``: the contract's golden samples on every runtime of the release matrix."""

    runtimes: list[RuntimeText] | None = None
    """Default: ``targets.runtimes``."""


class PlacementStep(Step):
    """``[steps.placement]``: where each node runs; fail when it is not on the required provider."""

    require: str | None = None
    """Every node must run on this provider (``cuda``, ``openvino``); default: the first target
    provider, or none."""
    allow_ops: list[str] = []
    """Op types allowed elsewhere (``Shape``)."""
    runtime: str | None = None
    """Default: the first target runtime."""
    feeds: FeedSettings = FeedSettings()
    """Feeds instead of the contract's golden samples (the default: the largest is run)."""


class TuneStep(Step):
    """``[steps.tune]``: the fastest session settings that keep parity, recorded in the contract."""

    objective: Literal["latency", "throughput"] = "latency"
    """``latency`` (p50 at the batch) or ``throughput`` (samples/s at the batch)."""
    batch: int | None = Field(None, ge=1)
    """The batch to tune at (default: a golden sample's, see ``dims``)."""
    dims: dict[str, int] = {}
    """One size per symbolic dimension to tune at; a golden sample at these sizes is used when
    there is one. With neither this nor ``batch``: the largest golden sample within the default
    shape, so tuning runs on the data the model was proven on."""
    time_budget: float | None = Field(600.0, ge=0, allow_inf_nan=False)
    """Seconds the whole tuning may take (see ``TuneConfig.time_budget``); 0 for no limit."""
    contest_seconds: float = Field(3.0, gt=0, allow_inf_nan=False)
    """Seconds of timed runs per side of the final contest."""
    search_budget: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Seconds the search may take; past them the best candidate measured so far goes on."""
    max_runs: int = Field(60, ge=1)
    """The most timed runs one candidate gets in the search."""
    threads: list[Annotated[int, Field(ge=1)]] | None = None
    """Intra-op thread counts to search instead of 1, 2, 4 ... up to the usable CPUs."""
    fusions: bool = True
    """Try graph rewrites: attention fusion, and ONNX Runtime's transformer fusions for
    encoders."""
    min_gain: float = Field(0.02, ge=0, lt=10)
    """The smallest improvement (0.02 = 2%) for which the winner replaces the defaults."""

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "budget" in data:
            raise ValueError(
                "`budget` was renamed: `contest_seconds` is the seconds per side of the final "
                "contest, `time_budget` the seconds the whole tuning may take"
            )
        return data

    @field_validator("time_budget")
    @classmethod
    def _no_limit(cls, value: float | None) -> float | None:
        return value or None


class QuantizeStep(Step):
    """``[steps.quantize]``: int8 inside an accuracy budget, never slower than float (or fp16)."""

    to: Literal["int8", "fp16", "bf16"] = Field("int8", exclude_if=lambda value: value == "int8")
    """int8, fp16 (every float node in float16, inputs and outputs float32; the worst nodes kept
    in float32 when the budget is missed; slower on most CPUs, which is said, not refused;
    written as NAME.fp16.onnx) or bf16 (always refused: ONNX Runtime's float16 converter cannot
    write bf16)."""

    mode: Literal["dynamic", "static"] = "dynamic"
    """``dynamic`` (scales computed at run time) or ``static`` (QDQ, calibrated on
    ``calibration``)."""
    preset: str = "auto"
    """Integer types for this CPU: ``auto`` reads its flags (``vnni``, ``avx2`` or ``arm64``;
    ``onnxgate quantize --help`` says what each chooses)."""
    recipes: list[str] = Field([], exclude_if=lambda value: not value)
    """int8 recipes to try instead of one way (``["auto"]``: those fast on this CPU; or names,
    ``onnxgate quantize --help`` lists them): each is gated where it runs and the fastest that
    meets the budget is kept; static ones need ``calibration``. Left out of the dump when empty,
    so the hashes of steps written before it stay."""
    per_channel: bool | None = None
    """One scale per output channel of each weight (true) or one per tensor (false); not set:
    the preset's choice."""
    reduce_range: bool | None = None
    """7-bit weights (true), ONNX Runtime's advice for x86 CPUs without VNNI against int16
    saturation, or 8-bit (false); not set: the preset's choice (8 bits, the accuracy budget
    judging any saturation)."""
    op_types: list[str] = []
    """Op types to quantise (default: Conv, ConvTranspose, Gemm, MatMul and Gather, less those
    the mode cannot quantise); leave one out when ONNX Runtime's quantiser cannot handle it."""
    max_drop: float = Field(0.01, ge=0, lt=1)
    """The budget: 1 - cosine, 1 - top-1 agreement, or accuracy points lost."""
    metrics: list[str] = []
    """``compare`` rules (``[OUTPUT:]METRIC OP VALUE``) that replace the budget for outputs."""
    outputs: list[str] = []
    """Outputs the budget judges (default: every float output)."""
    gate_metric: Literal["auto", "cosine", "top1", "accuracy"] = "auto"
    """How an output is judged against ``max_drop``: ``cosine`` (the mean row cosine), ``top1``
    (top-1 agreement of class scores) or ``accuracy`` (label accuracy lost; needs ``labels``);
    ``auto``: accuracy with ``labels`` on class scores (``[rows, classes]`` from a Softmax, or
    named logits/probabilities), top1 on class scores without them, cosine otherwise."""
    eval: str | None = None
    """Held-apart evaluation feeds (.npz, folder, JSON or ``package.module:function``)."""
    calibration: str | None = None
    """static: calibration feeds."""
    labels: Path | None = None
    """True labels of the evaluation rows (.npy, .npz, .json or .txt), in row order: the budget
    is then accuracy points lost."""
    max_excluded: int | None = Field(None, ge=0)
    """The most nodes the search may keep in float (not set: all but one); 0: no search."""
    bench: bool = True
    """Time the int8 model against the float one and fail when it is slower beyond noise."""
    bench_budget: float = Field(1.0, gt=0, allow_inf_nan=False)
    """Seconds of timed runs per model and shape."""
    allow_slower: bool = False
    """Keep an int8 model that is slower than the float one beyond noise (with a warning)."""
    required: bool = True
    """When False, a model that cannot be quantised inside the budget does not fail the gate."""


class BenchStep(Step):
    """``[steps.bench]``: latency, throughput and size, with thresholds, against a contender."""

    batches: list[Annotated[int, Field(ge=1)]] = []
    """Batch sizes to time at on synthetic feeds (default: the golden samples' shapes)."""
    dims: dict[str, list[int]] = {}
    """Sizes of symbolic dimensions to time at on synthetic feeds with ``[feeds]`` value ranges
    (default: the contract's golden samples, at the sizes proven)."""
    budget: float = Field(2.0, gt=0, allow_inf_nan=False)
    """Seconds of timed runs per configuration (interleaved with the contender's)."""
    vs: str | None = None
    """A contender: ``torch:package.module:factory`` or another .onnx file."""
    tuned: bool = True
    """Use what ``tune`` recorded for this machine, when the tune step ran."""
    runtimes: list[RuntimeText] | None = Field(None, exclude_if=lambda value: value is None)
    """Default: ``targets.runtimes`` (left out of the step's hash when unset, so cached results
    of configs without it stay valid). The model is timed on the installed ONNX Runtime (the
    figures the thresholds judge, with ``vs`` and ``tuned``), then on each other runtime listed
    (``onnxruntime==X``, ``onnxruntime-web==X``, ``onnxruntime-node==X``) with the same session
    settings, each in its own worker: their p50 and p99 are figures (``RUNTIME.p50_ms``), not
    judged. One that cannot be timed fails the step, named with its error; the other figures
    are kept."""
    session: SessionSettings = SessionSettings()
    """How the timed session is built (providers default to ``targets.providers``); when
    ``tuned`` applies, the settings ``tune`` recorded replace these."""
    max_p50_ms: float | None = Field(None, gt=0)
    """Fail when the median latency of any configuration is above this."""
    max_p99_ms: float | None = Field(None, gt=0)
    """Fail when the 99th-percentile latency of any configuration is above this."""
    min_speedup: float | None = Field(None, gt=0)
    """Fail when the model is not at least this many times faster than ``vs`` (1.0: not slower)."""
    max_size_mb: float | None = Field(None, gt=0)
    """Fail when the model (with external data) is larger than this."""
    on_unreliable: Literal["warn", "fail"] = "warn"
    """What the gate does when other load spoiled the timings a speed threshold (``max_p50_ms``,
    ``max_p99_ms``, ``min_speedup``) is judged on, even after timing again: the step is then
    ``inconclusive``, neither passed nor failed. ``warn``: the gate passes (and registers), the
    step marked inconclusive with the reason; ``fail``: the gate fails (exit 1). A latency
    threshold met on a busy machine passes either way: other load only slows a model down.
    Without a speed threshold bench only informs, and passes with its figures marked
    unreliable."""


class MobileStep(Step):
    """``[steps.mobile]``: the model in ONNX Runtime's ORT format, proven and held to edge budgets.

    Writes ``NAME.ort`` and ``NAME.required_operators.config`` (ONNX Runtime's converter) into
    the run folder, runs the golden samples on the ``.ort`` file under the contract's rules, and
    measures it in a fresh worker process with one intra-op thread.
    """

    optimization_style: Literal["Fixed", "Runtime"] = "Fixed"
    """``Fixed``: every optimisation baked in (for the CPU provider); ``Runtime``: basic ones
    baked in, others saved to replay at load (for NNAPI or CoreML)."""
    enable_type_reduction: bool = False
    """The operators config lists the types each operator needs, for a smaller minimal build."""
    budget: float = Field(1.0, gt=0, allow_inf_nan=False)
    """Seconds of timed single-thread runs per golden sample."""
    max_size_mb: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Fail when the ``.ort`` file is larger than this (MB)."""
    max_peak_rss_mb: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Fail when the model's share of peak resident memory is above this (MB): the peak of the
    worker that loaded the ``.ort`` file and ran the golden samples, less its peak before it
    opened the session (the interpreter, numpy and ONNX Runtime's library, which an app's
    process holds anyway). Both figures are reported."""
    max_p50_ms: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Fail when the single-thread median latency of any golden sample is above this."""
    on_unreliable: Literal["warn", "fail"] = "warn"
    """What the gate does when other load spoiled the timings ``max_p50_ms`` is judged on, even
    after timing again: the step is then ``inconclusive``; ``warn`` lets the gate pass, ``fail``
    fails it. A p50 budget met on a busy machine is met."""


class WebStep(Step):
    """``[steps.web]``: what a web app loads, proven on ``onnxruntime-web`` in a headless Chromium.

    Writes ``web/NAME.onnx`` (or ``web/NAME.ort`` with its operators config),
    ``web/NAME.inputs.json`` (the contract's input spec) and ``web/NAME.proof.json`` into the run
    folder, only when the contract's golden samples pass on the written file in the browser.
    """

    format: Literal["onnx", "ort"] = "onnx"
    """``onnx``: the model as gated; ``ort``: ONNX Runtime's ORT format, with its
    required-operators config."""
    runtime: Annotated[str, AfterValidator(_web_runtime)] = f"onnxruntime-web=={WEB_RELEASE}"
    """The browser runtime the proof runs on: ``onnxruntime-web==X.Y.Z``."""
    threads: int = Field(1, ge=1, le=64)
    """wasm threads the proof runs with."""


class StepsSection(Part):
    """``[steps]``: every step has its table; a missing table runs with its defaults."""

    check: CheckStep = CheckStep()
    export: ExportStep = ExportStep()
    compare: CompareStep = CompareStep()
    verify: VerifyStep = VerifyStep()
    placement: PlacementStep = PlacementStep()
    tune: TuneStep = TuneStep(enabled=False)
    quantize: QuantizeStep = QuantizeStep(enabled=False)
    bench: BenchStep = BenchStep()
    mobile: MobileStep = MobileStep(enabled=False)
    web: WebStep = WebStep(enabled=False)


class RegisterSection(Part):
    """``[register]``: where a passing version goes."""

    enabled: bool = True
    """Register a version when the gate passes."""
    name: str | None = None
    """Default: ``model.name``."""
    alias: str | None = Field(None, pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
    """Point ``name@alias`` at the new version (``champion``)."""
    registry: str | None = None
    """A SQLAlchemy URL; default: ``$ONNXGATE_REGISTRY``, else the embedded SQLite registry."""
    store: str | None = None
    """The registry's artefact store: a folder (relative to the config's folder), ``file://``
    URL or ``s3://bucket/prefix`` (kept as given); default: ``$ONNXGATE_STORE``, else beside a
    SQLite database, else the user data folder."""
    description: str | None = None
    """Recorded with the version (``registry show`` prints it)."""
    tags: dict[str, str] = {}
    """Recorded with the version (``{ task = "sentence-embedding" }``)."""
    mlflow: str | None = None
    """An MLflow tracking server's URI (``http://mlflow:5000``): the registered version is also
    published there as an ONNX-flavour model version (``registry publish mlflow``), under
    ``name``, with ``alias`` moved to it when set. Credentials in the URI are masked in the
    report."""


class OutputSection(Part):
    """``[output]``: where run folders go."""

    dir: Path = Path("gate-runs")
    """Each run writes ``DIR/NAME-YYYYmmdd-HHMMSS/``."""


class GateConfig(Part):
    """A whole ``gate.toml``."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    version: int
    """The file format's version: ``1``, the first line of the file."""
    model: ModelSection
    feeds: FeedsSection = FeedsSection()
    """``[feeds]``: data and serving ranges, for every step that sets none of its own."""
    targets: TargetsSection = TargetsSection()
    steps: StepsSection = StepsSection()
    registration: RegisterSection | None = Field(None, alias="register")
    """``[register]``: where a passing version goes; without the table nothing is registered.
    (The field is ``registration`` in Python: pydantic keeps ``register`` for itself.)"""
    output: OutputSection = OutputSection()

    @field_validator("version")
    @classmethod
    def _version(cls, value: int) -> int:
        if value != CONFIG_VERSION:
            raise ValueError(f"this onnxgate reads version {CONFIG_VERSION}; the file says {value}")
        return value

    def digest(self) -> str:
        """sha256 of the config's canonical JSON (defaults filled in)."""
        return config_hash(self)


def _cut(text: str, limit: int = SHOWN) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cut_quoted(message: str) -> str:
    """A library's explanation whole, with any value it quotes (``'…'``) cut to ``SHOWN``."""
    quoted = re.sub(rf"'[^'\n]{{{SHOWN},}}'", lambda m: _cut(m.group(0)) + "'", message)
    return _cut(quoted, MESSAGE)


def _explain(error: ValidationError, path: Path) -> ConfigError:
    lines = []
    for item in error.errors():
        where = _cut(repr(field_path(item["loc"]))[1:-1]) or "(top level)"
        if item["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown key")
        elif item["type"] == "missing":
            lines.append(f"{where}: missing")
        else:
            message = re.sub(r"^(Value error|Assertion failed), ", "", item["msg"])
            lines.append(f"{where}: {_cut_quoted(message)} (got {_cut(repr(item.get('input')))})")
    shown = "\n  ".join(lines[:12]) + (f"\n  ... {len(lines) - 12} more" if len(lines) > 12 else "")
    return ConfigError(
        f"{path} is not a valid gate config:\n  {shown}",
        hint="`onnxgate gate init MODEL` writes a complete config with every key commented.",
    )


def load_config(path: str | Path) -> GateConfig:
    """Read and validate a ``gate.toml``; relative paths in it are relative to its folder.

    Raises:
        ConfigError: the file is missing, too large, is not TOML, nests too deeply, or has an
            unknown, missing or bad key (named by its path, e.g. ``steps.bench.max_p50_ms``).
    """
    path = Path(path)
    data = _parse(path, _read(path))
    if "version" not in data:
        raise ConfigError(
            f"{path} has no `version = {CONFIG_VERSION}` line at the top.",
            hint="The version says which format the file is written in, so a newer onnxgate "
            "can read it or refuse it clearly.",
        )
    _check_values(data, path)
    try:
        config = GateConfig.model_validate(data)
    except ValidationError as error:
        raise _explain(error, path) from None
    _refuse_web_libraries(config, path)
    return _resolve_paths(config, path.parent)


def _refuse_web_libraries(config: GateConfig, path: Path) -> None:
    """Refuse ``[steps.web]`` with ``[targets] ops_libraries``: a browser loads no native library.

    Raises:
        ConfigError: naming the libraries and the web step's runtime, before any step runs.
    """
    libraries = config.targets.ops_libraries
    if not (config.steps.web.enabled and libraries):
        return
    raise ConfigError(
        f"{path}: [steps.web] proves the model on {config.steps.web.runtime}, which cannot load "
        f"the custom operator librar{'ies' if len(libraries) > 1 else 'y'} [targets] "
        f"ops_libraries names ({', '.join(libraries)}): ONNX Runtime's JavaScript packages load "
        "no native shared libraries.",
        hint="Set enabled = false in [steps.web]; a model with custom operators is served where "
        "ONNX Runtime loads its library (serve, deploy triton, deploy kserve).",
        field="steps.web.enabled",
    )


def _read(path: Path) -> str:
    """The file's text, as ``Path.read_text`` gives it (universal newlines), at most 1 MiB."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such gate config.", hint="`onnxgate gate init MODEL` writes one."
        ) from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the gate config: {error}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path} is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a gate config.",
            hint="A gate config is a few KB; give the gate.toml, not a data or model file.",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: cannot read the gate config: {error}") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _parse(path: Path, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None
    except (RecursionError, MemoryError):
        # tomllib recurses once per level of inline tables and arrays
        raise ConfigError(
            f"{path}: arrays or inline tables are nested too deeply to read.",
            hint=f"No gate key nests more than a few levels (at most {MAX_DEPTH}).",
        ) from None


def _check_values(data: dict[str, Any], path: Path) -> None:
    """Refuse what no key takes, before validation: deep nesting, NUL, integers past 64 bits.

    A loop, not recursion, so that nesting as deep as the parser allows cannot overflow the
    stack here or in pydantic; each refusal names the key path.
    """
    stack: list[tuple[tuple[str, ...], Any]] = [((), data)]
    while stack:
        where, value = stack.pop()
        if len(where) > MAX_DEPTH:
            raise ConfigError(
                f"{path}: {_key_path(where)} nests deeper than {MAX_DEPTH} levels; "
                "no gate key takes values nested more than a few.",
            )
        if isinstance(value, dict):
            for key, item in value.items():
                if "\x00" in key:
                    raise ConfigError(
                        f"{path}: {_key_path((*where, key))}: a NUL character in a key."
                    )
                stack.append(((*where, key), item))
        elif isinstance(value, list):
            stack.extend(((*where, f"[{i}]"), item) for i, item in enumerate(value))
        elif isinstance(value, str) and "\x00" in value:
            raise ConfigError(f"{path}: {_key_path(where)}: a NUL character in a string value.")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise ConfigError(
                f"{path}: {_key_path(where)}: {_cut(str(value))} is out of range "
                "(integers are 64-bit)."
            )


def _key_path(parts: tuple[str, ...]) -> str:
    """``("steps", "bench", "[0]")`` → ``steps.bench[0]``, control characters escaped, cut."""
    text = "".join(p if p.startswith("[") else f".{p}" for p in parts).lstrip(".")
    return _cut(repr(text)[1:-1]) or "(top level)"


def _store_location(store: str | None, base: Path) -> str | None:
    """A store folder relative to the config's folder; a URL (``s3://``, ``file://``) as given."""
    if store is None or "://" in store:
        return store
    path = Path(store).expanduser()
    return str(path if path.is_absolute() else base / path)


def _resolve_paths(config: GateConfig, base: Path) -> GateConfig:
    """Make file paths in the config relative to the config's folder, as a reader expects."""

    def fix(value: Any) -> Any:
        if isinstance(value, Path) and not value.is_absolute():
            return base / value
        return value

    def local(text: str | None) -> str | None:
        # data specs may be package.module:function; only existing-looking files are rebased
        try:
            if text and not Path(text).is_absolute() and (base / text).exists():
                return str(base / text)
        except OSError:  # a name too long for the file system names no file
            pass
        return text

    model = config.model
    source = model.source
    if model.kind == "onnx":
        source = str(fix(Path(source)))
    elif model.kind in ("sklearn", "tf", "keras"):
        source = f"{model.kind}:{fix(Path(model.location))}"
    model = model.model_copy(
        update={
            "source": source,
            "custom_objects": [fix(p) for p in model.custom_objects],
            "example_inputs": fix(model.example_inputs),
            "data": fix(model.data),
            # a torch entry point imports from the config's folder, wherever the gate runs from
            "root": fix(model.root) or base,
        }
    )
    steps = config.steps

    def feeds(f: FeedSettings) -> FeedSettings:
        return f.model_copy(update={"inputs": fix(f.inputs)})

    steps = steps.model_copy(
        update={
            "compare": steps.compare.model_copy(
                update={
                    "feeds": feeds(steps.compare.feeds),
                    "against": local(steps.compare.against),
                }
            ),
            "placement": steps.placement.model_copy(update={"feeds": feeds(steps.placement.feeds)}),
            "quantize": steps.quantize.model_copy(
                update={
                    "eval": local(steps.quantize.eval),
                    "calibration": local(steps.quantize.calibration),
                    "labels": fix(steps.quantize.labels),
                }
            ),
            "bench": steps.bench.model_copy(update={"vs": local(steps.bench.vs)}),
            "export": steps.export.model_copy(
                update={
                    "feeds": feeds(steps.export.feeds),
                    "reference": local(steps.export.reference),
                }
            ),
        }
    )
    targets = config.targets.model_copy(
        update={
            "ops_libraries": [
                lib if lib in PACKAGES else library_spec(base / Path(lib).expanduser())
                for lib in config.targets.ops_libraries
            ]
        }
    )
    update: dict[str, Any] = {"model": model, "steps": steps, "targets": targets}
    update["feeds"] = config.feeds.model_copy(update={"inputs": fix(config.feeds.inputs)})
    update["output"] = config.output.model_copy(update={"dir": fix(config.output.dir)})
    if config.registration is not None:
        update["registration"] = config.registration.model_copy(
            update={"store": _store_location(config.registration.store, base)}
        )
    return config.model_copy(update=update)
