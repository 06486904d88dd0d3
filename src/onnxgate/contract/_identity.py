"""Identity: which bytes a contract is about, and who vouches for them.

Which model file a contract is about: the one ``verify`` is given, always, identified by its
bytes. The contract's ``model`` field records the name it was written for, a plain name in the
contract's own folder, so a folder moved whole keeps its contracts valid. The file may have been
renamed since (``registry fetch`` writes ``NAME.onnx``, ``deploy`` writes ``model.onnx``, both
with the contract unchanged), so a different name alone is not refused; a contract whose
``model`` names *another file that exists beside it* is (CON001): it describes that file, and
whoever put it beside this one, with this one's sha256, wants it taken for that file's contract.
Names are compared as bytes, and a link to the same file is the same file.

Who vouches: a key's signature (``_sign``); ``sign_contract`` signs a contract that holds for its
files and is not hollow.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from onnxgate._pathtext import shown
from onnxgate.contract._golden import config_from_rules
from onnxgate.contract._hollow import contract_findings, refuse_hollow
from onnxgate.contract_store import (
    ENV_HMAC,
    ENV_SIGNING,
    SIDECAR,
    Contract,
    golden_path,
    identity,
    plain_name,
    same_name,
    sha256_file,
    sign,
    signer,
)
from onnxgate.errors import ArtefactCorrupt, ContractKeyMissing, ModelLoadError
from onnxgate.model import LoadedModel, Signature, load_model

log = logging.getLogger(__name__)


class Cell(BaseModel):
    """One check: identity, the signature, or one cell of one runtime."""

    model_config = ConfigDict(extra="forbid")

    passed: bool | None
    """None when the check could not run (the model did not load)."""
    reason: str | None = None


MODEL_NAMED = "CON001"
"""Rule code: the contract names another model file than the one verified."""


def named_elsewhere(loaded: LoadedModel, contract: Contract) -> str | None:
    """Why the contract is about another file than ``loaded`` (CON001), or None.

    See the module's note: the recorded name must be a plain name, the one its identity
    describes, and either the verified file's name or a name no other file beside it has.
    """
    here = loaded.path
    name = plain_name(contract.model)
    if name is None:
        return f"the contract's model {contract.model!r} is not a plain file name in its folder"
    if not same_name(contract.identity.model.path, name):
        return (
            f"the contract's model is {contract.model}, and its identity describes "
            f"{contract.identity.model.path}"
        )
    if same_name(contract.model, here.name):
        return None
    other = here.parent / name
    try:
        same = other.exists() and os.path.samefile(other, here)
    except OSError:
        same = False
    if other.exists() and not same:
        return (
            f"the contract names {shown(name)}, another file beside {shown(here.name)}: it "
            "describes that file, not this one"
        )
    return None  # renamed since (registry fetch, deploy): the bytes decide


def identity_cell(loaded: LoadedModel, contract: Contract) -> Cell:
    """The files' sha256 against the contract's, and the model file it names (CON001)."""
    now = identity(loaded)
    problems = []
    elsewhere = named_elsewhere(loaded, contract)
    if elsewhere is not None:
        problems.append(f"{MODEL_NAMED} {elsewhere}")
    if now.model.sha256 != contract.identity.model.sha256:
        problems.append(f"{shown(loaded.path.name)} differs from the contract's (sha256)")
    want = {f.path: f.sha256 for f in contract.identity.external_data}
    have = {f.path: f.sha256 for f in now.external_data}
    if contract.golden is not None:
        try:
            golden: Path | None = golden_path(loaded.path, contract.golden)
        except ModelLoadError as err:
            problems.append(err.message)
            golden = None
        if golden is not None and not golden.is_file():
            problems.append(f"the golden file {contract.golden.file} is missing")
        elif golden is not None and sha256_file(golden) != contract.golden.sha256:
            problems.append(
                f"the golden file {contract.golden.file} changed since the contract was written "
                "(re-export, or run contract init again for a model made elsewhere)"
            )
    for path in sorted(set(want) | set(have)):
        if want.get(path) != have.get(path):
            state = (
                "missing"
                if path not in have
                else "not in the contract"
                if path not in want
                else "changed"
            )
            problems.append(f"external data {path} is {state}")
    return Cell(passed=not problems, reason="; ".join(problems) or None)


def sign_contract(model: str | Path, *, allow_weak_rules: bool = False) -> Contract:
    """Sign the contract beside a model with the configured key; the library side of ``contract sign``.

    Only a contract that holds for the files beside it and is not hollow is signed: the identity
    (sha256, CON001) must pass and ``contract_findings`` find nothing it refuses. A signature
    vouches for the contract as it stands, so run ``verify`` first where that matters.

    Raises:
        ContractKeyMissing: no signing key is configured.
        ContractKeyError: the configured key is unusable.
        ArtefactCorrupt: the files are not the ones the contract describes (exit 1).
        HollowContract: the contract proves nothing, or has weak rules not admitted.
        ModelLoadError: the model, its contract or its golden file is missing or damaged, or a
            rule cannot be judged by (``config_from_rules``).
    """
    by = signer()
    if by is None:
        raise ContractKeyMissing(
            f"no signing key is configured: set {ENV_HMAC} (an HMAC secret) or {ENV_SIGNING} "
            "(an Ed25519 private key, PEM or its path)."
        )
    loaded = load_model(model)
    contract = SIDECAR.read(loaded.path)
    where = shown(SIDECAR.location(loaded.path))
    ident = identity_cell(loaded, contract)
    if not ident.passed:
        raise ArtefactCorrupt(
            f"{where}: not signed: {ident.reason}.",
            hint="Sign only a contract that holds for its files: re-create it with "
            "`onnxgate contract init --force`.",
        )
    arrays = SIDECAR.read_golden(loaded.path, contract)
    signature = Signature.from_graph(loaded.proto.graph)
    refuse_hollow(
        contract_findings(contract, signature, arrays), where, allow_weak_rules=allow_weak_rules
    )
    assert contract.golden is not None  # a contract without one is CON002
    config_from_rules(
        contract.golden.rules, where=where, outputs=[o.name for o in signature.outputs]
    )
    signed = sign(contract, by)
    SIDECAR.write(loaded.path, signed)
    log.info("signed %s with %s (key %s)", where, by.algorithm, by.key_id)
    return signed
