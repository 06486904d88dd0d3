"""The ONNX reference evaluator as a runner: slow, plain NumPy, and independent of ONNX Runtime.

The evaluator is onnx's own, with onnxgate's corrections of the operators it gets wrong
(``_reference_fixes``: each one cites the specification it follows and applies only to the
operator versions it fixes). When the evaluator crashes, the crash is the evaluator's, not the
model's: ``ReferenceFailed`` names the node and operator version that failed and points to ONNX
Runtime as the other reference.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Self

from onnx import ModelProto, NodeProto

from onnxgate._words import setting
from onnxgate.errors import FeedError, InternalError, ReferenceFailed, first_line
from onnxgate.model import LoadedModel, Signature, iter_model_nodes, load_model
from onnxgate.runners._base import Inference, RunnerInfo
from onnxgate.runners._reference_fixes import overrides, schema_version


def reference_hint() -> str:
    """What to do when the evaluator cannot run a model, in the words of the interface in use."""
    return (
        "The ONNX reference evaluator cannot be the reference for this model; use ONNX Runtime "
        f"without graph optimisations instead: {setting('reference', 'ort:disable')} for golden "
        f"outputs, {setting('against', 'ort:disable')} for a comparison."
    )


_FIXES = "onnxgate.runners._reference_fixes"
_STANDARD = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training")


def outside_evaluator(model: ModelProto) -> list[NodeProto]:
    """The nodes the evaluator has no implementation for: those of custom domains.

    A custom operator library's domains and ONNX Runtime's contrib operators, in every graph and
    function; calls of model-local functions excepted (the evaluator runs their bodies).
    """
    local = {(f.domain, f.name) for f in model.functions}
    return [
        node
        for node in iter_model_nodes(model)
        if node.domain not in _STANDARD and (node.domain, node.op_type) not in local
    ]


def describe_nodes(nodes: Sequence[NodeProto]) -> str:
    """``node 'tok' (ai.onnx.contrib:BertTokenizer)`` and how many more, by domain."""
    first = nodes[0]
    label = FailedNode(first.op_type, first.domain, first.name, None, False).describe()
    domains = ", ".join(dict.fromkeys(n.domain for n in nodes))
    more = f" and {len(nodes) - 1} more node(s)" if len(nodes) > 1 else ""
    return f"{label}{more}, of {domains}"


class FailedNode(NamedTuple):
    """A node the evaluator was running (or loading) when it raised."""

    op_type: str
    domain: str
    name: str
    opset: int | None
    override: bool
    """Whether the implementation that raised is onnxgate's own override, not onnx's."""

    def describe(self) -> str:
        """``node 'n1' (BatchNormalization-9)``, with the domain when it is not ai.onnx."""
        domain = "" if self.domain in ("", "ai.onnx") else f"{self.domain}:"
        version = (
            schema_version(self.op_type, self.domain, self.opset)
            if self.opset is not None and self.domain in _STANDARD
            else None
        )
        label = f"{domain}{self.op_type}" + (f"-{version}" if version else "")
        return f"node {self.name!r} ({label})" if self.name else f"an unnamed {label} node"


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__  # type: ignore[assignment]


def _frame_node(frame: Any) -> tuple[NodeProto, dict[str, int], object] | None:
    """The node a frame of the evaluator works on, the opsets in force there, and its runner."""
    local = frame.f_locals
    owner = local.get("self")
    name = frame.f_code.co_name
    if isinstance(getattr(owner, "onnx_node", None), NodeProto):  # an OpRun method
        params = getattr(owner, "run_params", None)
        opsets = params.get("opsets", {}) if isinstance(params, dict) else {}
        return owner.onnx_node, opsets, owner  # type: ignore[union-attr]
    opsets = getattr(owner, "opsets", None) or {}
    if name == "_init" and isinstance(local.get("node"), NodeProto):  # building the evaluator
        return local["node"], opsets, None
    running = local.get("node")
    if name == "run" and isinstance(getattr(running, "onnx_node", None), NodeProto):
        return running.onnx_node, opsets, running  # the evaluator's loop, between two nodes
    return None


def failing_nodes(error: BaseException) -> list[FailedNode]:
    """The evaluator's nodes on the way to ``error``, outermost (the model's own node) first.

    The evaluator wraps nothing in its own exception type, so the traceback is read: its frames
    hold the ``OpRun`` instance that was running (``self.onnx_node``), the node the evaluator's
    loop was at, or the ``NodeProto`` being loaded while the evaluator was built. A subgraph
    (If, Loop, Scan) or a function body adds its inner node after the outer one.
    """
    found: list[FailedNode] = []
    seen: set[int] = set()
    for link in _chain(error):  # the last raised holds the outer frames, its causes the inner
        tb = link.__traceback__
        while tb is not None:
            hit = _frame_node(tb.tb_frame)
            if hit is not None and id(hit[0]) not in seen:
                node, opsets, runner = hit
                seen.add(id(node))
                override = runner is not None and type(runner).__module__ == _FIXES
                found.append(
                    FailedNode(
                        node.op_type,
                        node.domain or "ai.onnx",
                        node.name,
                        opsets.get(node.domain),
                        override,
                    )
                )
            tb = tb.tb_next
    return found


def _raised_in_fixes(error: BaseException) -> bool:
    """Whether onnxgate's corrections, not onnx's evaluator, were running when ``error`` rose.

    Of the frames of the first exception of the chain that belong to onnx or to
    ``_reference_fixes``, the deepest decides: an override may hand the work to onnx's own
    implementation (the class onnx would have picked for that version), and an exception from
    there is the evaluator's; one from the override's own code (or what it calls outside onnx,
    such as NumPy) is onnxgate's.
    """
    import onnx

    onnx_dir = str(Path(onnx.__file__).parent)
    origin = list(_chain(error))[-1]
    tb, deepest = origin.__traceback__, None
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if Path(name).name == "_reference_fixes.py":
            deepest = "fixes"
        elif name.startswith(onnx_dir):
            deepest = "onnx"
        tb = tb.tb_next
    return deepest == "fixes"


def _failure(error: BaseException, path: Path, *, loading: bool) -> ReferenceFailed | InternalError:
    """The error to raise for an exception of the evaluator."""
    nodes = failing_nodes(error)
    doing = "cannot load" if loading else "failed on"
    what = f"the ONNX reference evaluator {doing} {path}"
    if nodes:
        where = nodes[0].describe()
        if len(nodes) > 1:
            where += ", inside it " + ", then ".join(n.describe() for n in nodes[1:])
        what += f" at {where}"
    reason = first_line(error, with_type=True).rstrip(".")
    innermost = nodes[-1] if nodes else None
    unknown = isinstance(error, NotImplementedError) and innermost is not None
    custom = innermost if unknown and innermost.domain not in _STANDARD else None  # type: ignore[union-attr]
    if custom is not None or "is not specified" in str(error):
        domain = custom.domain if custom else "a domain without an opset import"
        return ReferenceFailed(
            f"{what}: it implements only the standard domains (ai.onnx, ai.onnx.ml) and "
            f"model-local functions, and the model uses {domain} ({reason}).",
            hint=reference_hint(),
        )
    if nodes and nodes[-1].override and _raised_in_fixes(error):  # onnxgate's own code raised
        return InternalError(
            f"{what}: onnxgate's own correction of that operator raised {reason}. This is a bug "
            "in onnxgate; please report it with the model.",
            hint=reference_hint(),
        )
    return ReferenceFailed(f"{what}: {reason}.", hint=reference_hint())


def _feeds_first(model: LoadedModel, feeds: Mapping[str, Any], failure: ReferenceFailed) -> None:
    """Blame the feeds, not the evaluator, when ONNX Runtime cannot run them either.

    Synthesized feeds the model cannot take (a size its graph refuses) make every runner fail;
    only when ONNX Runtime runs the same feeds is the evaluator's failure its own.

    Raises:
        FeedError: ONNX Runtime (every graph optimisation off) fails on the same feeds.
    """
    import numpy as np

    from onnxgate.data import describe_shapes, unnamed_dims
    from onnxgate.errors import RunFailed, SessionFailed
    from onnxgate.runners.runtimes import open_runner
    from onnxgate.settings import SessionSettings

    signature = Signature.from_graph(model.proto.graph)
    free = sorted(
        {d for spec in signature.inputs for d in spec.symbolic_dims} | set(unnamed_dims(signature))
    )
    if not free:
        return  # the feeds have the model's own shapes: whatever fails, it is not their size
    try:
        with open_runner(model, SessionSettings(opt_level="disable")) as ort:
            ort.infer(feeds)
    except SessionFailed:
        return  # ONNX Runtime does not load the model: nothing tells about the feeds
    except RunFailed as err:
        shapes = {k: list(np.shape(v)) for k, v in feeds.items() if isinstance(v, np.ndarray)}
        why = first_line(err.__cause__) if err.__cause__ is not None else err.message
        sizes = f"sizes that fit with {setting('feeds.dims', free)}, or "
        raise FeedError(
            f"the feeds do not fit {model.path}: neither ONNX Runtime nor the reference "
            f"evaluator runs {describe_shapes(signature, shapes)}. ONNX Runtime says: {why}",
            hint=f"Give {sizes}real data with {setting('feeds.inputs')}.",
        ) from failure
    except Exception:  # a second runner that cannot judge leaves the first verdict standing
        return


class ReferenceRunner:
    """``onnx.reference.ReferenceEvaluator`` on a model, weights included.

    It is 40–150× slower than ONNX Runtime on real networks, which is the price of an
    implementation written straight from the operator specifications. Operators it gets wrong
    are replaced by onnxgate's corrections (``onnxgate.runners._reference_fixes``).
    """

    name = "reference"
    method = "the ONNX reference evaluator's intermediate=True tensors (nothing added to the model)"

    def __init__(self, model: LoadedModel) -> None:
        self.model = model
        self._evaluator: Any = None

    def __enter__(self) -> Self:
        from onnx.reference import ReferenceEvaluator  # 0.3 s to import: only when used

        model = self.model
        if not model.weights_loaded:
            model = load_model(model.path, load_weights=True)
        try:
            self._evaluator = ReferenceEvaluator(model.proto, new_ops=list(overrides()))
        except Exception as err:  # the evaluator raises whatever its operator classes raise
            raise _failure(err, model.path, loading=True) from err
        self._outputs = [o.name for o in model.proto.graph.output]
        return self

    def __exit__(self, *exc: object) -> None:
        self._evaluator = None

    def input_specs(self) -> Signature:
        """The model's own signature."""
        return Signature.from_graph(self.model.proto.graph)

    def _run(self, feeds: Mapping[str, Any], *, intermediate: bool) -> Any:
        if self._evaluator is None:
            raise RuntimeError("the reference runner is used outside its `with` block")
        try:
            return self._evaluator.run(None, dict(feeds), intermediate=intermediate)
        except Exception as err:  # the evaluator raises whatever its operator classes raise
            failure = _failure(err, self.model.path, loading=False)
            if isinstance(failure, ReferenceFailed):
                _feeds_first(self.model, feeds, failure)
            raise failure from err

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        """Run once.

        Raises:
            ReferenceFailed: the evaluator raised; the message names the node.
            InternalError: one of onnxgate's operator corrections raised.
        """
        start = time.perf_counter_ns()
        values = self._run(feeds, intermediate=False)
        elapsed = time.perf_counter_ns() - start
        return Inference(dict(zip(self._outputs, values, strict=True)), elapsed)

    def info(self) -> RunnerInfo:
        """The onnx package's version (the evaluator ships with it) and onnxgate's corrections."""
        import onnx

        from onnxgate.runners._reference_fixes import overrides

        fixed = sorted(f"{op.op_domain or 'ai.onnx'}:{op.__name__}" for op in overrides())
        return RunnerInfo(
            name=self.name, runtime="onnx", version=onnx.__version__, settings={"overrides": fixed}
        )

    def sibling(self, model: LoadedModel) -> ReferenceRunner:
        """The reference evaluator (with onnxgate's corrections) on another model."""
        return type(self)(model)

    def infer_all(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Every tensor the evaluator computed, by name."""
        values = self._run(feeds, intermediate=True)
        return {name: value for name, value in values.items() if name}
