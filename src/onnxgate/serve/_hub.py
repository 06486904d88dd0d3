"""The server's core, below both protocols: which versions are served, readiness, inference.

``Hub`` holds, for every served name, its versions (a ``Predictor`` and a ``Batcher`` each) and
the one requests go to when they name no version. A reference that follows an alias
(``name@champion``, or a bare name for the latest version) is polled in the registry; when the
alias moves to another version whose gate passed, the new version is opened and proven beside the
old one, requests switch to it only once it is ready, and the old one is unloaded after its
pending requests finished. A version that fails its proof never takes traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from onnxgate._version import __version__
from onnxgate.errors import (
    ConfigError,
    GateError,
    InvalidRequest,
    ModelNotServed,
    NotGated,
    RequestRefused,
    Unavailable,
)
from onnxgate.serve._batcher import Batcher, Observer
from onnxgate.serve._fallback import Placements
from onnxgate.serve._metrics import Metrics
from onnxgate.serve._model_config import PLATFORM, TritonOptions, build_config
from onnxgate.serve._offpath import Foreground
from onnxgate.serve._predictor import Predictor, PredictorConfig
from onnxgate.serve._refuse import echo, unique
from onnxgate.serve._shadow import Shadows, ShadowSettings
from onnxgate.serve._source import current_number, served_name, split_name
from onnxgate.serve._tensors import datatype_of
from onnxgate.serve._types import (
    InferRequest,
    InferResponse,
    ModelMetadata,
    TensorMetadata,
)
from onnxgate.serve._watch import Watch, WatchSettings
from onnxgate.settings import Part

log = logging.getLogger(__name__)

EXTENSIONS = (
    "binary_tensor_data",
    "model_configuration",
    "statistics",
    "onnxgate_contract_validation",
)


class ModelSettings(Part):
    """How one model is batched and bounded."""

    batching: bool = True
    """Stack requests along the batch axis the contract proves (models without one run alone)."""
    max_batch: int | None = Field(None, ge=1)
    """Samples per execution at most; default: the largest batch the contract proved, at most 32."""
    max_delay_ms: float = Field(2.0, ge=0)
    """How long the oldest request may wait for others to join its batch."""
    max_queue: int = Field(256, ge=1)
    """Requests pending at most; beyond, 503 / UNAVAILABLE."""
    instances: int = Field(1, ge=1)
    """Executions at once (each uses ONNX Runtime's intra-op threads)."""


class ServeConfig(Part):
    """Everything ``onnxgate serve`` is told, as one config (the CLI builds it from flags)."""

    predictor: PredictorConfig = PredictorConfig()
    model: ModelSettings = ModelSettings()
    """Settings of every model not named in ``models``."""
    models: dict[str, ModelSettings] = {}
    """Settings per served model name."""
    poll_seconds: float = Field(5.0, ge=0)
    """How often aliases are looked up in the registry; 0 never."""
    grace_seconds: float = Field(30.0, ge=0)
    """How long shutdown and an alias switch wait for pending requests."""
    max_body_bytes: int = Field(256 << 20, ge=1024)
    """The largest request body (JSON or binary) the protocols accept; beyond, 413."""
    max_header_bytes: int = Field(64 << 10, ge=1024)
    """The largest request head: REST's request line and header fields (beyond, 431) and gRPC's
    metadata (beyond, RESOURCE_EXHAUSTED)."""
    max_headers: int = Field(100, ge=1)
    """The most header fields a REST request may have; beyond, 431."""
    shadow: ShadowSettings = ShadowSettings()
    """Candidates run beside the champions on sampled traffic, judged (see ``serve._shadow``)."""
    watch: WatchSettings = WatchSettings()
    """Drift of traffic and provider fallback while serving (``serve._watch``, ``_fallback``)."""

    def settings_for(self, name: str) -> ModelSettings:
        """The settings of one served model."""
        return self.models.get(name, self.model)


DEFAULT_MAX_BATCH = 32


class _Observer(Observer):
    def __init__(self, metrics: Metrics, name: str, version: str) -> None:
        self._queue = metrics.queue_seconds.labels(name, version)
        self._compute = metrics.compute_seconds.labels(name, version)
        self._request_compute = metrics.request_compute_seconds.labels(name, version)
        self._by_batch = metrics.batch_compute_seconds
        self._labels = (name, version)
        self._batches: dict[int, Any] = {}
        self._batch = metrics.batch_size.labels(name, version)
        self._exec = metrics.executions.labels(name, version)
        self._count = metrics.inferences.labels(name, version)
        self._pending = metrics.pending.labels(name, version)

    def queued(self, seconds: float) -> None:
        self._queue.observe(seconds)

    def executed(self, seconds: float, rows: int, requests: int) -> None:
        self._compute.observe(seconds)
        for _ in range(requests):  # Triton's compute_infer counts requests, each with its batch's
            self._request_compute.observe(seconds)
        by_size = self._batches.get(rows)
        if by_size is None:
            by_size = self._batches[rows] = self._by_batch.labels(*self._labels, str(rows))
        by_size.observe(seconds)
        self._batch.observe(rows)
        self._exec.inc()
        self._count.inc(rows)

    def pending(self, count: int) -> None:
        self._pending.set(count)


@dataclass
class Served:
    """One loaded version: its predictor and its batcher."""

    predictor: Predictor
    batcher: Batcher

    @property
    def version(self) -> str:
        return self.predictor.version


@dataclass
class Entry:
    """A served name: its versions and the default one."""

    name: str
    item: str
    """What the user asked to serve (``NAME=REF``, a ref, a file)."""
    versions: dict[str, Served] = field(default_factory=dict)
    current: str = ""
    follow: str | None = None
    """The registry reference to poll (``name@champion``), when it follows an alias."""
    refused: set[int] = field(default_factory=set)
    """Versions the alias pointed at that failed to open or prove (not retried)."""


def _in_context(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """``fn(*args)`` in a copy of this context, for the executor (which copies none).

    A model opened off the loop keeps the caller's context, such as the words its messages speak.
    """
    return functools.partial(contextvars.copy_context().run, fn, *args)


class Hub:
    """The served models, their readiness, and inference; used by both protocol front ends."""

    def __init__(self, config: ServeConfig | None = None) -> None:
        self.config = config or ServeConfig()
        self.metrics = Metrics()
        self.entries: dict[str, Entry] = {}
        self.loading: dict[str, str] = {}
        """Names being opened and proven by ``load`` (their requests get 503, not 404), by item."""
        self.draining = False
        """Stopping: not ready, but answering what the front ends accepted (see ``serve._drain``)."""
        self.stopping = False
        """Stopped: every request is refused (503 / UNAVAILABLE)."""
        self.started = time.time()
        self._executor = ThreadPoolExecutor(max_workers=64, thread_name_prefix="onnxgate-run")
        self._watchers: list[asyncio.Task[None]] = []
        self.foreground = Foreground()
        """Requests in flight, to which shadow runs yield (``serve._offpath``)."""
        self.shadows = Shadows(self)
        self.watch = Watch(self.config.watch, self.metrics.watch)
        """Drift summaries of the traffic, off the request path."""
        self.placements = Placements(self.config.watch, self.metrics.watch)
        """Periodic placement audits: a provider that stops claiming nodes."""

    @property
    def leaving(self) -> bool:
        """Draining or stopped: not ready."""
        return self.draining or self.stopping

    @property
    def max_body_bytes(self) -> int:
        """The largest request body either protocol accepts."""
        return self.config.max_body_bytes

    # -- loading ---------------------------------------------------------------------------------

    def _batcher(self, predictor: Predictor) -> Batcher:
        settings = self.config.settings_for(predictor.name)
        proven = predictor.max_batch
        max_batch = settings.max_batch or min(proven or DEFAULT_MAX_BATCH, DEFAULT_MAX_BATCH)
        if proven is not None and max_batch > proven:
            log.warning(
                "%s: max_batch %d is above the largest batch the contract proved (%d); using %d",
                predictor.name,
                max_batch,
                proven,
                proven,
            )
            max_batch = proven
        batched = settings.batching and predictor.batch_dim is not None
        if settings.batching and predictor.batch_dim is None:
            log.info(
                "%s: no batch axis in the contract; requests run one at a time", predictor.name
            )
        batcher = Batcher(
            predictor.serve,
            batched=batched,
            max_batch=max_batch,
            max_delay=settings.max_delay_ms / 1000,
            max_queue=settings.max_queue,
            instances=settings.instances,
            executor=self._executor,
            observer=_Observer(self.metrics, predictor.name, predictor.version),
            label=f"{predictor.name}@{predictor.version}",
        )
        batcher.start()
        log.info(
            "%s@%s: %s, %d execution(s) at once, queue of %d",
            predictor.name,
            predictor.version,
            f"batches of up to {max_batch} along {predictor.batch_dim!r} (the contract proved "
            f"{proven or 'any size'}), waiting up to {settings.max_delay_ms:g} ms"
            if batched
            else "no batching",
            settings.instances,
            settings.max_queue,
        )
        return batcher

    def _open(self, item: str) -> Predictor:
        return Predictor.open(item, self.config.predictor)

    def expect(self, items: Sequence[str]) -> None:
        """Name the items about to load: a request for one is "still loading" (503), not 404.

        Called before the server listens, so no request finds a name it will serve unknown.
        """
        for item in items:
            self.loading.setdefault(served_name(item), item)

    async def load(self, items: Sequence[str]) -> None:
        """Open and prove every item, one after another; start following aliases.

        A model whose proof fails is kept, not ready, with the reason in its metadata.

        Raises:
            GateError: an item cannot be opened at all (not gated, not found, no session).
            ConfigError: two items are served under one name.
        """
        loop = asyncio.get_running_loop()
        self.expect(items)
        try:
            for item in items:
                predictor = await loop.run_in_executor(
                    self._executor, _in_context(self._open, item)
                )
                if predictor.name in self.entries:
                    predictor.close()
                    raise ConfigError(
                        f"two models would be served as {predictor.name!r}; name one NAME=REF."
                    )
                entry = Entry(predictor.name, item, follow=predictor.source.alias and item)
                self._add(entry, predictor)
                self.entries[predictor.name] = entry
                self.loading.pop(served_name(item), None)
        finally:
            self.loading.clear()
        unknown = sorted(set(self.config.models) - set(self.entries))
        if unknown:
            raise ConfigError(
                f"settings are given for {', '.join(map(repr, unknown))}, which this server does "
                f"not serve (it serves {', '.join(sorted(self.entries))}).",
                field="models",
            )
        await self.shadows.load()
        if self.config.poll_seconds > 0:
            for entry in self.entries.values():
                if entry.follow:
                    watch = self._watch(entry, lambda e=entry: self.check_alias(e))
                    self._watchers.append(loop.create_task(watch))
            for shadow in self.shadows.followed():
                watch = self._watch(shadow, lambda s=shadow: self.shadows.check_alias(s))
                self._watchers.append(loop.create_task(watch))
        self._watchers.append(
            loop.create_task(self.placements.follow(self.entries, self._executor))
        )

    def _add(self, entry: Entry, predictor: Predictor) -> None:
        entry.versions[predictor.version] = Served(predictor, self._batcher(predictor))
        self.metrics.ready.labels(predictor.name, predictor.version).set(int(predictor.ready))
        if predictor.ready or not entry.current:
            entry.current = predictor.version

    async def _watch(self, entry: Any, check: Callable[[], Awaitable[bool]]) -> None:
        """Poll ``entry``'s alias (a served name's, or a shadow candidate's) with ``check``."""
        while not self.stopping:
            await asyncio.sleep(self.config.poll_seconds)
            try:
                await check()
            except asyncio.CancelledError:
                raise
            except GateError as err:
                log.warning("%s: looking up %s failed: %s", entry.name, entry.follow, err)
            except Exception:  # a watcher must not die: the server keeps serving what it has
                log.exception("%s: following %s failed", entry.name, entry.follow)

    async def check_alias(self, entry: Entry) -> bool:
        """Look the alias up once; switch to the version it names if it is new and proven.

        Returns:
            True when a switch happened.
        """
        predictor = await self.next_version(entry)
        if predictor is None:
            return False
        old = entry.versions.get(entry.current)
        self._add(entry, predictor)
        entry.current = predictor.version
        log.info("%s: switched to version %s", entry.name, predictor.version)
        if old is not None:
            await self._retire(entry, old)
        return True

    async def next_version(
        self, entry: Any, opener: Callable[[str], Predictor] | None = None
    ) -> Predictor | None:
        """Look ``entry``'s alias up once: the version it names, opened and proven, if it is new.

        ``entry`` has ``name``, ``follow``, ``current`` and ``refused`` (an ``Entry``, or a
        shadow candidate's ``Shadow``); ``opener`` opens an item (default: as a served version).
        A version whose gate did not pass, or that is not ready here, is refused (not retried
        until the alias moves again); one that cannot be opened now is retried next time.
        """
        assert entry.follow is not None
        loop = asyncio.get_running_loop()
        settings = self.config.predictor
        _, ref = split_name(entry.follow)
        number, passed = await loop.run_in_executor(
            self._executor, current_number, ref, settings.registry, settings.store
        )
        if str(number) == entry.current or number in entry.refused:
            return None
        if not passed and not self.config.predictor.allow_ungated:
            log.error("%s: %s points at version %d, whose gate did not pass; staying on %s",
                      entry.name, ref, number, entry.current)  # fmt: skip
            entry.refused.add(number)
            return None
        base = ref.partition("@")[0].partition(":")[0]
        item = f"{entry.name}={base}@{number}"
        log.info("%s: %s now points at version %d; opening and proving it", entry.name, ref, number)
        try:
            predictor = await loop.run_in_executor(
                self._executor, _in_context(opener or self._open, item)
            )
        except NotGated as err:  # a verdict: not retried until the alias moves again
            log.error("%s: version %d is refused: %s", entry.name, number, err)
            entry.refused.add(number)
            return None
        except GateError as err:  # the registry or the files may come back: retried next time
            log.warning("%s: version %d cannot be opened now (%s); staying on %s, will retry",
                        entry.name, number, err, entry.current)  # fmt: skip
            return None
        if not predictor.ready:
            log.error("%s: version %d is not ready here (%s); staying on %s",
                      entry.name, number, predictor.why_not(), entry.current)  # fmt: skip
            entry.refused.add(number)
            predictor.close()
            return None
        return predictor

    async def _retire(self, entry: Entry, served: Served) -> None:
        drained = await served.batcher.drain(self.config.grace_seconds)
        if not drained:
            log.warning("%s@%s: %d request(s) still pending after %.0f s; unloading anyway",
                        entry.name, served.version, served.batcher.pending,
                        self.config.grace_seconds)  # fmt: skip
        entry.versions.pop(served.version, None)
        await served.batcher.close()
        served.predictor.close()
        self.metrics.ready.labels(entry.name, served.version).set(0)
        self.watch.forget(entry.name, served.version)
        self.placements.forget(entry.name, served.version)

    # -- health and metadata ---------------------------------------------------------------------

    def live(self) -> bool:
        """The process is up and answering."""
        return True

    def ready(self) -> bool:
        """Every served name's default version is proven here, and the server is not stopping."""
        return (
            not self.leaving
            and bool(self.entries)
            and all(e.versions[e.current].predictor.ready for e in self.entries.values())
            and not any(self.placements.unready(e.name, e.current) for e in self.entries.values())
        )

    def served(self, name: str, version: str | None = None) -> Served:
        """The version a request names (the default one without ``version``).

        Raises:
            ModelNotServed: no such name or version here.
        """
        entry = self.entries.get(name)
        if entry is None and name in self.loading:
            raise Unavailable(
                f"model {name!r} is still loading (being opened and proven); retry in a few "
                "seconds."
            )
        if entry is None:
            raise ModelNotServed(
                f"model {echo(name)} is not served here; this server serves "
                f"{', '.join(sorted(self.entries)) or 'nothing'}."
            )
        found = entry.versions.get(version or entry.current)
        if found is None:
            raise ModelNotServed(
                f"model {echo(name)} has no version {echo(version)} here; it serves "
                f"{', '.join(sorted(entry.versions))}."
            )
        return found

    def model_ready(self, name: str, version: str | None = None) -> bool:
        """Whether that version is proven here.

        Raises:
            ModelNotServed: no such name or version here.
        """
        return self.readiness(name, version)[0]

    def readiness(self, name: str, version: str | None = None) -> tuple[bool, str]:
        """Whether that version is proven here, and why not (empty when it is).

        Raises:
            ModelNotServed: no such name or version here.
            Unavailable: the name is still loading.
        """
        served = self.served(name, version)
        if self.leaving:
            return False, "the server is shutting down"
        predictor = served.predictor
        held = self.placements.unready(name, served.version)
        if predictor.ready and not held:
            return True, ""
        return False, f"{name}@{served.version} is not ready: {predictor.why_not() or held}"

    def model_config(self, name: str, version: str | None = None) -> Any:
        """Triton's ``ModelConfig`` of the model as served.

        What ``deploy triton`` writes for its contract (``_model_config.build_config``), with
        this server's batching, queue, instances and session settings, and no warm-ups (the
        server proves the model on its golden samples instead).

        Raises:
            ModelNotServed: no such name or version here.
            Unavailable: the name is still loading.
        """
        served = self.served(name, version)
        predictor = served.predictor
        settings = self.config.settings_for(name)
        batcher = served.batcher
        options = TritonOptions(
            max_batch=batcher.max_batch if batcher.batched else 0,
            max_queue_delay_us=round(settings.max_delay_ms * 1000),
            max_queue=settings.max_queue,
            instances=settings.instances,
        )
        message, _ = build_config(
            _served_contract(predictor),
            options,
            name=name,
            version=int(served.version) if served.version.isdigit() else 1,
            settings=predictor.runner.settings.wire(),
            warmups=(),
        )
        return message

    def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """Triton's statistics of every served version (of ``name``, or only ``version``).

        Raises:
            ModelNotServed: no such name or version here, or a version without a name.
            Unavailable: the name is still loading.
        """
        if not name and version:  # REST has no such path: both protocols answer not found
            raise ModelNotServed(
                f"statistics of version {echo(version)} need a model name; name one of "
                f"{', '.join(sorted(self.entries)) or 'nothing'}, or neither for every model."
            )
        if not name:
            names = sorted(self.entries)
        else:
            self.served(name, version or None)
            names = [name]
        served = [
            (each, number)
            for each in names
            for number in (
                [version] if version else sorted(self.entries[each].versions, key=_number)
            )
        ]
        return self.metrics.statistics(served)

    def server_metadata(self) -> dict[str, object]:
        """``{"name", "version", "extensions"}``."""
        return {"name": "onnxgate", "version": __version__, "extensions": list(EXTENSIONS)}

    def model_metadata(self, name: str, version: str | None = None) -> ModelMetadata:
        """Inputs and outputs with -1 for symbolic dims, and whether (and why not) it is ready.

        Raises:
            ModelNotServed: no such name or version here.
        """
        served = self.served(name, version)
        predictor = served.predictor

        labels = predictor.labels

        def tensors(specs: Sequence) -> list[TensorMetadata]:
            return [
                TensorMetadata(s.name, "FP32", [-1, len(labels[s.name] or ()) or -1])
                if s.name in labels  # a map output, served as [N, K] (see serve._maps)
                else TensorMetadata(
                    s.name,
                    datatype_of(s.dtype),
                    [d if isinstance(d, int) and d > 0 else -1 for d in (s.shape or ())],
                )
                for s in specs
            ]

        held = self.placements.unready(name, served.version)
        ready = predictor.ready and not self.leaving and not held
        reason = held or (predictor.proof.reason if predictor.proof else predictor.why_not())
        return ModelMetadata(
            name=name,
            versions=sorted(self.entries[name].versions, key=_number),
            platform=PLATFORM,
            inputs=tensors(predictor.inputs),
            # the shape the model returns where its golden outputs contradict the declared one
            outputs=tensors(predictor.contract.signature.served_outputs()),
            ready=ready,
            reason="shutting down" if self.leaving else reason,
            source=f"{predictor.source.ref} ({predictor.source.gate})",
            labels={name: found for name, found in labels.items() if found is not None},
        )

    # -- inference -------------------------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse:
        """Validate against the contract, queue, batch, run; the outputs asked for.

        Raises:
            ModelNotServed: unknown model or version (404).
            InvalidRequest: the request breaks the contract (400).
            PayloadTooLarge: the tensors are above the limit (413).
            Unavailable: not ready, queue full, or shutting down (503).
            RunFailed: ONNX Runtime failed on valid input (500).
        """
        with self.foreground.request():  # shadow runs yield (counted once: a front end may have)
            return await self._infer(request)

    async def _infer(self, request: InferRequest) -> InferResponse:
        start = time.perf_counter()
        name = request.model
        version = request.version or ""
        try:
            served = self.served(name, request.version)
            version = served.version
            self.metrics.last_inference.labels(name, version).set(time.time())
            predictor = served.predictor
            if self.stopping:
                raise Unavailable("the server is shutting down; retry on another replica.")
            if not predictor.ready:
                raise Unavailable(f"{name}@{version} is not ready: {predictor.why_not()}")
            feeds = predictor.validate(request.inputs)
            asked = unique(request.outputs) if request.outputs else None
            names = asked or predictor.output_names
            unknown = [n for n in names if n not in predictor.output_names]
            if unknown:
                raise InvalidRequest(
                    f"output {echo(unknown[0])} is not an output of {name}; it has "
                    f"{', '.join(predictor.output_names)} (rule output.unknown)"
                )
            result = await served.batcher.submit(feeds, asked)
            self.watch.offer(predictor, feeds, result)
        except Exception as err:
            self.count_failure(name, version, err, time.perf_counter() - start)
            raise
        if self.shadows:  # after the answer is computed; O(1), never raises (serve._shadow)
            self.shadows.offer(name, served, feeds, result, time.perf_counter() - start)
        self.metrics.success.labels(name, version).inc()
        self.metrics.request_seconds.labels(name, version).observe(time.perf_counter() - start)
        return InferResponse(name, version, [(n, result[n]) for n in names], request.id)

    def count_failure(
        self, name: str, version: str, error: BaseException, seconds: float = 0.0
    ) -> None:
        """Count a refused or failed request (front ends call it for what they refuse)."""
        if name not in self.entries:
            name, version = "", ""  # unknown names must not grow the label set
        elif version not in self.entries[name].versions:
            version = ""
        reason = error.status if isinstance(error, RequestRefused) else "internal"
        self.metrics.failure.labels(name, version, reason).inc()
        self.metrics.failure_seconds.labels(name, version).inc(seconds)

    # -- stopping --------------------------------------------------------------------------------

    async def stop(self, grace: float | None = None) -> None:
        """Refuse new requests, let pending ones finish within ``grace`` seconds, unload.

        Args:
            grace: what is left of the grace period (default: all of ``grace_seconds``).
        """
        self.stopping = True
        self.foreground.close()  # no shadow run starts any more
        for task in self._watchers:
            task.cancel()
        for task in self._watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        grace = self.config.grace_seconds if grace is None else max(grace, 0.0)
        everything = [s for e in self.entries.values() for s in e.versions.values()]
        drained = await asyncio.gather(*(s.batcher.drain(grace) for s in everything))
        if not all(drained):
            log.warning("stopping with requests still pending after %.0f s", grace)
        for served in everything:
            await served.batcher.close()
            served.predictor.close()
            self.metrics.ready.labels(served.predictor.name, served.version).set(0)
        self.shadows.close()
        self.watch.close()
        self._executor.shutdown(wait=False, cancel_futures=True)


def _served_contract(predictor: Predictor) -> Any:
    """The predictor's contract with its outputs as served.

    The shapes its golden outputs showed, and each map output (scikit-learn's ZipMap) as FP32
    ``[N, K]`` (see ``_maps``): what ``deploy triton`` deploys (``deploy._model``).
    """
    from onnxgate.model import TensorSpec

    signature = predictor.contract.signature
    rows = predictor.batch_dim or next((s.shape[0] for s in predictor.inputs if s.shape), "N")
    outputs = [
        TensorSpec(
            name=spec.name,
            dtype="float32",
            shape=(rows, len(predictor.labels[spec.name] or ())),
            type="tensor(float)",
        )
        if predictor.labels.get(spec.name)
        else spec
        for spec in signature.served_outputs()
    ]
    return predictor.contract.model_copy(
        update={"signature": signature.model_copy(update={"outputs": outputs, "observed": {}})}
    )


def _number(version: str) -> tuple[int, str]:
    return (int(version), version) if version.isdigit() else (1 << 62, version)
