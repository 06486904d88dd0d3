"""The contract's read side: its schema, where it is kept, its signature, what it proved.

A model's contract (``model.contract.json`` and ``model.golden.npz``) is read by steps on both
sides of the ``contract`` package: ``compare`` and ``placement`` take the sizes a contract proved
for their synthetic feeds, and every step that opens ONNX Runtime passes ``contract_tensorrt``
(TensorRT profiles from the proven ranges) to its runners, while ``contract`` writes and verifies
contracts with ``compare``'s judgement. So the document and its store sit below the steps and
above the runners (which never read a contract: what it gives them is passed in). ``contract``
re-exports what its users know it by (``onnxgate.contract.Contract``, ``SIDECAR``).
"""

from onnxgate.contract_store._names import file_name, plain_name, same_name, stored_name
from onnxgate.contract_store._read import contract_dims
from onnxgate.contract_store._schema import (
    CONTRACT_FORMAT,
    Contract,
    DimBound,
    FileDigest,
    Golden,
    GoldenSample,
    Identity,
    Lineage,
    Machine,
    ObservedShape,
    OpsLibraryRequirement,
    OutputRule,
    Performance,
    Provenance,
    Requirements,
    SecondOpinion,
    SignatureContract,
    Signing,
    Timing,
    TunedSettings,
    ValueBound,
    contract_paths,
    digest,
    dim_bounds,
    golden_path,
    identity,
    recordable,
    sha256_file,
)
from onnxgate.contract_store._sign import (
    ENV_HMAC,
    ENV_REQUIRE,
    ENV_SIGNING,
    ENV_VERIFY,
    canonical,
    check_signature,
    seal,
    sign,
    sign_new,
    signature_required,
    signer,
    verifiers,
)
from onnxgate.contract_store._store import SIDECAR, ContractStore, SidecarStore
from onnxgate.contract_store._tensorrt import (
    contract_extras,
    contract_tensorrt,
    default_cache,
    tensorrt_options,
)

__all__ = [
    "CONTRACT_FORMAT",
    "ENV_HMAC",
    "ENV_REQUIRE",
    "ENV_SIGNING",
    "ENV_VERIFY",
    "SIDECAR",
    "Contract",
    "ContractStore",
    "DimBound",
    "FileDigest",
    "Golden",
    "GoldenSample",
    "Identity",
    "Lineage",
    "Machine",
    "ObservedShape",
    "OpsLibraryRequirement",
    "OutputRule",
    "Performance",
    "Provenance",
    "Requirements",
    "SecondOpinion",
    "SidecarStore",
    "SignatureContract",
    "Signing",
    "Timing",
    "TunedSettings",
    "ValueBound",
    "canonical",
    "check_signature",
    "contract_dims",
    "contract_extras",
    "contract_paths",
    "contract_tensorrt",
    "default_cache",
    "digest",
    "dim_bounds",
    "file_name",
    "golden_path",
    "identity",
    "plain_name",
    "recordable",
    "same_name",
    "seal",
    "sha256_file",
    "sign",
    "sign_new",
    "signature_required",
    "signer",
    "stored_name",
    "tensorrt_options",
    "verifiers",
]
