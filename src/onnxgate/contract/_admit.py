"""Admission: what a contract must pass before anything trusts it, the same for verify and serve.

``verify`` and ``serve`` (a predictor's proof) both hold a model to its contract, and a contract
either would refuse must be refused by both, or the weaker door is the one an attacker uses.
So both call ``admit``, in this order:

1. Identity (``_identity``): the files' sha256, the model file the contract names (CON001), and,
   with a verifying key configured, its signature (``_sign``: CON010 unsigned, CON011 edited since
   signed, another key, forged). A failed identity is a verdict, not an error: nothing runs, and
   the caller reports it (``verify`` exits 1, ``serve`` keeps the model not ready).
2. Evidence (``_hollow``): the golden file is read, and a contract that proves nothing
   (CON002-CON005), or has rules weaker than their floors (CON006, unless admitted), is refused
   with ``HollowContract``; its rules must turn into tolerances (``config_from_rules``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxgate.contract._golden import config_from_rules, golden_pairs
from onnxgate.contract._hollow import ContractFinding, contract_findings, refuse_hollow
from onnxgate.contract._identity import MODEL_NAMED, Cell, identity_cell, named_elsewhere
from onnxgate.contract_store import (
    SIDECAR,
    Contract,
    ContractStore,
    check_signature,
    signature_required,
)
from onnxgate.data import Sample
from onnxgate.model import LoadedModel, Signature
from onnxgate.settings import Tolerances


@dataclass(frozen=True)
class Admission:
    """What ``admit`` found; ``expected`` and ``tolerances`` are set only when it ``passed``."""

    identity: Cell
    """The files' sha256, the model the contract names (CON001) and the signature (CON010,
    CON011)."""
    signature: Cell
    """The signature alone: passed None when no verifying key is configured (not checked)."""
    findings: list[ContractFinding] = field(default_factory=list)
    """Identity's failures with their codes, and weak rules admitted by ``allow_weak_rules``."""
    expected: list[tuple[Sample, dict[str, np.ndarray]]] = field(default_factory=list)
    """The golden samples with their expected outputs."""
    tolerances: Tolerances | None = None
    """The contract's rules, as the comparison takes them."""

    @property
    def passed(self) -> bool:
        """The identity holds (evidence that does not hold raises instead)."""
        return bool(self.identity.passed)


def evidence(
    loaded: LoadedModel,
    contract: Contract,
    arrays: Mapping[str, np.ndarray],
    where: str,
    *,
    allow_weak_rules: bool,
) -> tuple[list[ContractFinding], Tolerances]:
    """Refuse a contract that proves nothing; the weak rules admitted, and its tolerances.

    Raises:
        HollowContract: CON002-CON005, or CON006 without ``allow_weak_rules``.
        ModelLoadError: a rule cannot be turned into a tolerance (``config_from_rules``).
    """
    signature = Signature.from_graph(loaded.proto.graph)
    admitted = refuse_hollow(
        contract_findings(contract, signature, arrays), where, allow_weak_rules=allow_weak_rules
    )
    assert contract.golden is not None  # a contract without one is CON002
    tolerances = config_from_rules(
        contract.golden.rules, where=where, outputs=[o.name for o in signature.outputs]
    )
    return admitted, tolerances


def admit(
    loaded: LoadedModel,
    contract: Contract,
    *,
    where: str,
    store: ContractStore = SIDECAR,
    require_signature: bool = False,
    allow_weak_rules: bool = False,
) -> Admission:
    """Hold ``contract`` to the files of ``loaded`` and to what a contract must prove.

    Args:
        loaded: the model the contract is about (the file given, identified by its bytes).
        contract: its contract.
        where: the contract, for messages.
        store: where its golden file is kept.
        require_signature: refuse when no verifying key is configured
            (``ONNXGATE_REQUIRE_SIGNATURE=1`` does the same).
        allow_weak_rules: admit rules weaker than their floors (CON006): reported, not refused.

    Returns:
        The identity's verdict; when it passed, the golden samples and tolerances to run.

    Raises:
        HollowContract: the identity holds and the contract proves nothing (CON002-CON005), or
            has rules weaker than their floors (CON006) not admitted.
        ModelLoadError: the golden file is missing, changed or damaged, or a rule is unusable.
        ContractKeyMissing: a signature is required and no verifying key is configured.
        ContractKeyError: a configured key is unusable.
        ConfigError: ``ONNXGATE_REQUIRE_SIGNATURE`` holds something else than a yes or a no.
    """
    require = signature_required(require_signature)
    ident = identity_cell(loaded, contract)
    checked = check_signature(contract, require=require)
    signature = Cell(passed=checked.passed, reason=checked.detail)
    findings = []
    if (elsewhere := named_elsewhere(loaded, contract)) is not None:
        findings.append(ContractFinding(code=MODEL_NAMED, message=elsewhere))
    if checked.code is not None:
        findings.append(ContractFinding(code=checked.code, message=checked.detail))
        ident = Cell(
            passed=False,
            reason="; ".join(filter(None, (ident.reason, f"{checked.code} {checked.detail}"))),
        )
    if not ident.passed:
        return Admission(ident, signature, findings)
    arrays = store.read_golden(loaded.path, contract)
    admitted, tolerances = evidence(
        loaded, contract, arrays, where, allow_weak_rules=allow_weak_rules
    )
    return Admission(
        ident,
        signature,
        findings + admitted,
        golden_pairs(contract, arrays, where),
        tolerances,
    )


def parity_summary(compared: Any, samples: int) -> str:
    """A comparison against the golden samples in one line: the worst figure, or what failed.

    ``compared`` is ``compare_runners``' report against the ``GoldenRunner``; the line names
    each failing output with its reason (the figure and the rule it broke).
    """
    if compared.passed:
        worst = max(compared.outputs, key=lambda o: o.max_abs or 0.0, default=None)
        return f"{samples} golden sample(s) within the contract's rules" + (
            f"; worst max_abs {worst.max_abs:.3g} ({worst.name})"
            if worst and worst.max_abs is not None
            else ""
        )
    return "; ".join(
        f"{o.name}: {o.reason}" + _figures(o) for o in compared.outputs if not o.passed
    )


def _figures(output: Any) -> str:
    """`` (max_abs 0.81, cosine 0.97)``: a failing output's figures, when it has them."""
    shown = [
        f"{name} {value:.3g}"
        for name in ("max_abs", "cosine")
        if (value := getattr(output, name, None)) is not None and name not in (output.reason or "")
    ]
    return f" ({', '.join(shown)})" if shown else ""


def admitted(loaded: LoadedModel) -> tuple[Contract, Admission]:
    """The contract beside ``loaded`` and its admission, for a step that writes a target.

    Raises:
        ParityError: the contract does not describe this file (its identity failed).
        ModelLoadError, HollowContract: the contract is missing, damaged or proves nothing.
    """
    from onnxgate._pathtext import shown
    from onnxgate.errors import ParityError

    contract = SIDECAR.read(loaded.path)
    admission = admit(loaded, contract, where=shown(SIDECAR.location(loaded.path)))
    if not admission.passed:
        raise ParityError(
            f"{shown(loaded.path)}: its contract does not describe this file "
            f"({admission.identity.reason}).",
            hint="Deploy the model the contract was written for (`onnxgate verify` says more).",
        )
    return contract, admission
