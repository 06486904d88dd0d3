"""The custom operator libraries a contract records, and the host's held to them.

A model with custom-domain operators (onnxruntime-extensions' tokenizers, a team's own kernels)
only loads in a session that registered the library implementing them, so the library is part of
what the contract proves: each one's name, version and sha256 are recorded where the contract is
written (``library_requirements``). ``verify`` and ``serve`` run with the libraries they are given,
else with the contract's, found by name on this host (``host_libraries``); a host whose library is
missing, or is another build than the one recorded, is refused before any session is made
(``refuse_other_libraries``): parity proven with one build of a tokenizer says nothing of another.
"""

from __future__ import annotations

from collections.abc import Sequence

from onnxgate._opslib import PACKAGES, OpsLibrary, resolve_ops_library
from onnxgate._words import setting
from onnxgate.contract_store import Contract, OpsLibraryRequirement
from onnxgate.errors import ConfigError, RuntimeEnvError


def library_requirements(specs: Sequence[str]) -> list[OpsLibraryRequirement]:
    """The libraries ``specs`` name, as a contract records them (resolved on this host).

    Raises:
        ConfigError: a path that is not a readable file.
        ExtraMissing: a named package is not installed.
    """
    return [OpsLibraryRequirement(**resolve_ops_library(s).requirement()) for s in specs]


def host_libraries(contract: Contract, given: Sequence[str], *, where: str) -> tuple[str, ...]:
    """The libraries to register: ``given``, else the contract's, found by name on this host.

    A package (``onnxruntime-extensions``) is found wherever it is installed; a shared library
    recorded by its file name alone cannot be found, and must be given.

    Raises:
        ConfigError: the contract records a file that was not given.
    """
    if given:
        return tuple(given)
    files = [r.name for r in contract.requirements.ops_libraries if r.name not in PACKAGES]
    if files:
        raise ConfigError(
            f"{where} records the custom operator "
            f"librar{'ies' if len(files) > 1 else 'y'} {', '.join(files)}, which this host "
            "cannot find by name.",
            hint=f"Give the path of each with {setting('ops_libraries', ['PATH'])}: the build "
            "the contract recorded (its sha256 is checked).",
            field="ops_libraries",
        )
    return tuple(r.name for r in contract.requirements.ops_libraries)


def _described(requirement: OpsLibraryRequirement | OpsLibrary) -> str:
    version = f" {requirement.version}" if requirement.version else ""
    return f"{requirement.name}{version} (sha256 {requirement.sha256[:12]})"


def refuse_other_libraries(contract: Contract, specs: Sequence[str], *, where: str) -> None:
    """Refuse a host whose libraries are not the ones the contract recorded.

    Every recorded library must be among ``specs`` (by name) with the same version and sha256;
    libraries the contract does not record are allowed (a contract written before they were
    recorded).

    Raises:
        RuntimeEnvError: a recorded library is missing here, or is another build.
        ConfigError: a given path is not a readable file.
        ExtraMissing: a named package is not installed.
    """
    recorded = contract.requirements.ops_libraries
    if not recorded:
        return
    here = {lib.name: lib for lib in (resolve_ops_library(s) for s in specs)}
    for wanted in recorded:
        found = here.get(wanted.name)
        if found is None:
            raise RuntimeEnvError(
                f"{where} records the custom operator library {_described(wanted)}; this host "
                f"registers {', '.join(map(_described, here.values())) or 'none'}.",
                hint=f"Register it: {setting('ops_libraries', [_how(wanted)])}.",
            )
        if (found.version, found.sha256) != (wanted.version, wanted.sha256):
            raise RuntimeEnvError(
                f"{where} records the custom operator library {_described(wanted)}; this host "
                f"has {_described(found)} at {found.path}.",
                hint=_fix(wanted, same_release=found.version == wanted.version),
            )


def _how(wanted: OpsLibraryRequirement) -> str:
    return wanted.name if wanted.name in PACKAGES else "PATH"


def _fix(wanted: OpsLibraryRequirement, *, same_release: bool) -> str:
    if wanted.name in PACKAGES and same_release:
        # reinstalling the release it names would bring back the same file
        return (
            f"This host's {wanted.name} {wanted.version} is another build than the one the "
            "contract recorded (another platform's wheel, or a rebuilt one): install the "
            "contract's build, or prove the model with this one again (contract init --force, "
            "or the gate)."
        )
    if wanted.name in PACKAGES:
        return (
            f"Install the release the contract recorded (pip install '{wanted.name}=="
            f"{wanted.version}'), or prove the model with this one again (contract init "
            "--force, or the gate)."
        )
    return (
        f"Give the build the contract recorded with {setting('ops_libraries', ['PATH'])}, or "
        "prove the model with this one again (contract init --force, or the gate)."
    )
