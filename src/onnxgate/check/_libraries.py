"""Which of a model's custom operators the named custom operator libraries provide.

A library's schemas exist only inside a session that registered it, so they are found by loading:
one one-node model per custom (domain, operator) kind the target runtime does not know, loaded by
that runtime with and without the libraries (``_opsprobe.py``, run where the runtime runs). The
kinds that get past ONNX Runtime's schema lookup only with the libraries are provided; ``OP003``
is not reported for them, and is reported, naming the libraries tried, for the rest. Nothing is
cached: the answer depends on the library files' bytes, and the probes take milliseconds.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import ModelProto, NodeProto, TypeProto, helper

from onnxgate._opslib import OpsLibrary, resolve_ops_library
from onnxgate.compat.kernels import KernelOracle
from onnxgate.compat.runtime import RuntimeProfile, installed_runtime
from onnxgate.compat.versions import STANDARD_DOMAINS, normalize_domain
from onnxgate.model import iter_model_nodes
from onnxgate.runners import RuntimeSpec, Script, refusal, refuse_libraries, run_script

log = logging.getLogger(__name__)

PROBE = Script(
    "onnxgate.check._opsprobe", "probe", "the custom operator library probe", "onnxgate-opsprobe-"
)
"""``_opsprobe.py``, run where the checked runtime runs (``runners.run_script``)."""


@dataclass(frozen=True)
class LibraryCoverage:
    """The libraries tried and the custom (domain, operator) kinds they provide."""

    libraries: tuple[OpsLibrary, ...]
    provided: frozenset[tuple[str, str]]
    """Kinds as the rules key them: (normalised domain, operator)."""
    probed: frozenset[tuple[str, str]] = frozenset()
    """The kinds loaded with the libraries (those the runtime's own registry does not know)."""

    @property
    def tried(self) -> str:
        """The libraries as messages name them: ``onnxruntime-extensions 0.15.2, libmy_ops.so``."""
        return ", ".join(
            f"{lib.name} {lib.version}" if lib.version else lib.name for lib in self.libraries
        )


def custom_kinds(model: ModelProto, table: KernelOracle | None) -> dict[tuple[str, str], NodeProto]:
    """The first node of each custom-domain kind the runtime's own registry does not know."""
    found: dict[tuple[str, str], NodeProto] = {}
    local = {(normalize_domain(f.domain), f.name) for f in model.functions}
    for node in iter_model_nodes(model):
        key = (normalize_domain(node.domain), node.op_type)
        if key[0] in STANDARD_DOMAINS or key in local or key in found:
            continue
        if table is None or not table.knows(node.op_type, key[0]):
            found[key] = node
    return found


def _stand_in(name: str, proto: TypeProto | None) -> onnx.ValueInfoProto:
    """A graph input of the node's inferred type, or float32 where none was inferred.

    The type only has to be a type: the schema lookup the probe asks about comes before type
    checks, so a wrong stand-in fails after it, which still shows the kind is provided.
    """
    if proto is not None and proto.WhichOneof("value") is not None:
        return helper.make_value_info(name, proto)
    return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)


def probe_model(node: NodeProto, source: ModelProto, protos: Mapping[str, TypeProto]) -> ModelProto:
    """A model holding ``node`` alone (no subgraphs, no weights), its inputs typed stand-ins."""
    copy = NodeProto()
    copy.CopyFrom(node)
    reads = [n for n in dict.fromkeys(node.input) if n]
    inputs = [_stand_in(n, protos.get(n)) for n in reads]
    outputs = [onnx.ValueInfoProto(name=n) for n in node.output if n]
    graph = helper.make_graph([copy], "onnxgate library probe", inputs, outputs)
    model = helper.make_model(graph, opset_imports=list(source.opset_import))
    model.ir_version = source.ir_version
    return model


def library_coverage(
    model: ModelProto,
    libraries: Sequence[str],
    profile: RuntimeProfile,
    table: KernelOracle | None,
    protos: Mapping[str, TypeProto],
    progress: Callable[[str], None] | None = None,
) -> LibraryCoverage:
    """Which of the model's unknown custom kinds ``libraries`` provide on ``profile``'s runtime.

    Raises:
        ConfigError: a library path is not a readable file. ExtraMissing: a named package is
            not installed. RuntimeEnvError: the runtime cannot load a library (built for another
            platform or a newer ONNX Runtime API), or cannot be started.
    """
    resolved = tuple(resolve_ops_library(spec) for spec in libraries)
    found = installed_runtime()
    runtime = (
        RuntimeSpec()
        if found == (profile.package, profile.version)
        else RuntimeSpec(profile.package, profile.version)
    )
    refuse_libraries(runtime, {"ops_libraries": list(libraries)})  # the JavaScript packages
    # probed even when the model has no custom kind: registering the libraries is then the whole
    # probe, so a library that every session of the model would fail to load fails check too
    kinds = custom_kinds(model, table)
    with tempfile.TemporaryDirectory(prefix="onnxgate-opsprobe-models-") as folder:
        probes = []
        for index, ((_, op_type), node) in enumerate(kinds.items()):
            path = Path(folder) / f"probe{index}.onnx"
            path.write_bytes(probe_model(node, model, protos).SerializeToString())
            probes.append({"domain": node.domain, "op_type": op_type, "model": str(path)})
        request = {"libraries": [str(lib.path) for lib in resolved], "probes": probes}
        answer = run_script(PROBE, request, runtime=runtime, progress=progress)
    if answer.get("error"):
        raise refusal(answer, runtime=profile.label, what="the custom operator library probe")
    provided = frozenset((normalize_domain(d), op) for d, op in answer["provided"])
    for domain, op_type, said in answer.get("inconclusive", []):
        log.info("%s:%s cannot be probed alone (%s); it stays unknown", domain, op_type, said)
    log.info(
        "custom operator libraries %s provide %d of %d custom operator kind(s)",
        ", ".join(lib.name for lib in resolved),
        len(provided),
        len(kinds),
    )
    return LibraryCoverage(resolved, provided, frozenset(kinds))
