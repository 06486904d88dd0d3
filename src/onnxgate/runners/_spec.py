"""Runners named on the command line: ``reference``, ``ort:basic``, ``torch:pkg.mod:factory``..."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from onnxgate.errors import ConfigError
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.runners._base import Runner
from onnxgate.runners.runtimes import RunExtras, RuntimeSpec, open_runner
from onnxgate.settings import SessionSettings

SPEC_HELP = (
    "`reference` (the ONNX reference evaluator), `ort` or `ort:ITEMS` (ONNX Runtime with "
    "comma-separated changes: an optimisation level disable/basic/extended/layout/all and/or "
    "providers, e.g. ort:disable or ort:cuda,cpu), `torch:package.module:factory` (a PyTorch "
    "module), `tf:SAVED_MODEL_DIR`, `tf:DIR#SIGNATURE` or `tf:FILE.keras` (TensorFlow, in its "
    "own environment), `sklearn:FILE.joblib` (needs --trust-pickle), another .onnx file, or a runtime "
    "`PACKAGE==X.Y.Z` (onnxruntime==1.20.1, onnxruntime-web==1.30.0, onnxruntime-node==1.30.0) "
    "running the same model with the same session settings."
)


def make_runner(
    spec: str,
    model: LoadedModel,
    *,
    session: SessionSettings | None = None,
    trust_pickle: bool = False,
    extras: RunExtras | None = None,
) -> Runner:
    """The runner a spec names, for ``model`` (whose signature non-ONNX runners follow).

    Args:
        spec: see ``SPEC_HELP``.
        model: the model under test.
        session: the settings that ``ort:...`` specs start from and other .onnx files use.
        trust_pickle: allow ``sklearn:`` files to be unpickled.
        extras: per-run things for ONNX Runtime runners (``open_runner``), such as the
            contract's TensorRT options and where to save the optimised model.

    Raises:
        ConfigError: the spec names nothing runnable.
    """
    from onnxgate.runners._ort import OPT_LEVELS, label, resolved_providers

    base = session or SessionSettings()
    kind, _, rest = spec.partition(":")
    if spec == "reference":
        from onnxgate.runners._reference import ReferenceRunner

        return ReferenceRunner(model)
    if kind == "ort":
        levels = [item for item in rest.split(",") if item.strip() in OPT_LEVELS]
        providers = tuple(i.strip() for i in rest.split(",") if i.strip() and i not in levels)
        if len(levels) > 1:
            raise ConfigError(f"runner {spec!r} names more than one optimisation level.")
        resolved_providers(providers)  # names only, as ever: ``ort:cpu:k=v`` is no provider
        # flat: replacing the providers keeps the options the given ones named inline
        settings = base.flat().model_copy(
            update={
                "opt_level": levels[0].strip() if levels else base.opt_level,
                "providers": providers or base.flat().providers,
            }
        )
        return open_runner(model, settings, extras=extras)
    if kind == "torch" and rest:
        from onnxgate.runners._torch import TorchRunner

        return TorchRunner(rest, Signature.from_graph(model.proto.graph))
    if kind == "tf" and rest:
        from onnxgate.runners._tf import TfRunner

        return TfRunner(rest, model, progress=(extras or RunExtras()).progress)
    if kind == "sklearn" and rest:
        from onnxgate.runners._sklearn import SklearnRunner

        return SklearnRunner(
            rest, Signature.from_graph(model.proto.graph), trust_pickle=trust_pickle
        )
    if "==" in spec:
        return open_runner(model, base, runtime=RuntimeSpec.parse(spec), extras=extras)
    if spec.endswith(".onnx") or Path(spec).is_file():
        other = load_model(spec)
        name = f"{Path(spec).name} on onnxruntime[{label(base)}]"
        extras = dataclasses.replace(extras or RunExtras(), name=name)
        return open_runner(other, base, extras=extras)
    raise ConfigError(f"{spec!r} names no runner.", hint=f"Use {SPEC_HELP}")
