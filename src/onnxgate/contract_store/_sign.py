"""Signed contracts: a key vouches for a contract, so an edited one fails even with its sha updated.

Identity proves that the files are the ones the contract names by sha256, but whoever can write
the model can write the contract beside it and update those sha256 fields too. A signature by a
key that only CI or the registry holds closes that gap: ``verify`` with the verifying key
configured fails a contract that is unsigned, signed by another key, or edited since (CON010,
CON011).

Keys come from the environment only, never from a flag (a flag ends up in shell history and
process lists):

- ``ONNXGATE_CONTRACT_KEY``: an HMAC-SHA256 secret of at least 16 bytes; it signs and verifies.
- ``ONNXGATE_CONTRACT_SIGNING_KEY``: an Ed25519 private key, PEM text or the path of a PEM file;
  it signs, and its public half verifies.
- ``ONNXGATE_CONTRACT_VERIFY_KEY``: an Ed25519 public key, PEM text or a path; it only verifies.

What is signed is ``canonical(contract)``: a fixed prefix, then the JSON of every field but
``signing``, keys sorted, no spaces, ASCII only. A field of a schema model is left out only when
its value is the field's static declared default (``format`` 1, ``golden: None``, ``[]`` for
``skipped_outputs``), so a field a later onnxgate adds with such a default does not void older
signatures; a field left out reads back as that same default, so no two contracts share their
bytes. Everything else is kept: a required field even when null or empty (``shape: []``, a
scalar, is not ``shape: null``, an unknown rank), every entry of a mapping, and every field with
a ``default_factory`` (the ``created`` timestamp is content, not a default to compare with the
clock). Non-finite floats are written ``Infinity``, ``-Infinity`` and ``NaN``, bare tokens no
string or null can be confused with (a float field of the contract file holds them as the strings
``"Infinity"``, ``"-Infinity"`` and ``"NaN"``, which read back as the floats). Give a new field a
static default, never a factory, or older signatures break. The contract is signed as it reads
back from its file, so the bytes are the same before writing and after reading. Files are covered
through their sha256: the model, its external data, the golden file, an optimised graph ``tune``
recorded.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined, to_jsonable_python

from onnxgate.contract_store._schema import Contract, Signing
from onnxgate.errors import ConfigError, ContractKeyError, ContractKeyMissing, ExtraMissing

log = logging.getLogger(__name__)

ENV_HMAC = "ONNXGATE_CONTRACT_KEY"
ENV_SIGNING = "ONNXGATE_CONTRACT_SIGNING_KEY"
ENV_VERIFY = "ONNXGATE_CONTRACT_VERIFY_KEY"
ENV_REQUIRE = "ONNXGATE_REQUIRE_SIGNATURE"
KEY_VARIABLES = (ENV_HMAC, ENV_SIGNING, ENV_VERIFY)

DOMAIN = b"onnxgate contract signature v1\n"
"""Prefix of the signed bytes, so a signature over a contract is never valid for anything else."""
MIN_HMAC_KEY = 16
"""Bytes an HMAC secret must have at least."""
UNSIGNED = "CON010"
"""Rule code: the contract is unsigned and a verifying key is configured."""
BAD_SIGNATURE = "CON011"
"""Rule code: the signature does not hold (edited since signed, another key, or forged)."""


def _at_static_default(field: FieldInfo, value: Any) -> bool:
    """Whether ``value`` is the field's declared default (never for a factory's)."""
    if field.default_factory is not None or field.default is PydanticUndefined:
        return False
    default = field.default
    return type(value) is type(default) and value == default


def _document(value: Any) -> Any:
    """``value`` as canonical JSON data: fields at their static default left out (see above)."""
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        return {
            name: _document(item)
            for name, field in fields.items()
            if not _at_static_default(field, item := getattr(value, name))
        }
    if isinstance(value, Mapping):
        return {str(k): _document(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_document(v) for v in value]
    if value is None or isinstance(value, str | int | float):
        return value  # a non-finite float is written as a bare token by json.dumps
    return to_jsonable_python(value)


def canonical(contract: Contract) -> bytes:
    """The bytes a signature covers: everything but ``signing``, deterministically serialised.

    See the module's note for which fields are left out and how non-finite floats are written.
    """
    document = _document(contract)
    document.pop("signing", None)
    return DOMAIN + json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True
    ).encode("ascii")


def content_sha256(contract: Contract) -> str:
    """The sha256 of ``canonical(contract)``."""
    return hashlib.sha256(canonical(contract)).hexdigest()


@dataclass(frozen=True)
class Verifier:
    """Checks one algorithm's signatures with one configured key."""

    algorithm: str
    key_id: str
    env: str
    """The environment variable the key came from, for messages."""
    check: Callable[[bytes, str], bool]


@dataclass(frozen=True)
class Signer:
    """Signs with one configured key; ``verifier`` checks its own signatures."""

    algorithm: str
    key_id: str
    env: str
    make: Callable[[bytes], str]
    verifier: Verifier


def _hmac_key() -> bytes | None:
    value = os.environ.get(ENV_HMAC)
    if not value:
        return None
    key = value.encode("utf-8", "surrogateescape")
    if len(key) < MIN_HMAC_KEY:
        raise ContractKeyError(
            f"{ENV_HMAC} holds {len(key)} bytes; an HMAC key needs at least {MIN_HMAC_KEY}.",
            hint=f"Set {ENV_HMAC} to a random secret, e.g. `openssl rand -hex 32`.",
        )
    return key


def _hmac_pair(key: bytes) -> Signer:
    def make(data: bytes) -> str:
        return hmac.new(key, data, hashlib.sha256).hexdigest()

    def check(data: bytes, value: str) -> bool:
        return hmac.compare_digest(make(data), value)

    key_id = hmac.new(key, b"onnxgate contract key id", hashlib.sha256).hexdigest()[:16]
    verifier = Verifier("hmac-sha256", key_id, ENV_HMAC, check)
    return Signer("hmac-sha256", key_id, ENV_HMAC, make, verifier)


def _pem(env: str) -> bytes | None:
    """The PEM an environment variable holds, or the content of the file it names."""
    value = os.environ.get(env)
    if not value:
        return None
    if value.lstrip().startswith("-----BEGIN"):
        return value.encode("utf-8")
    path = Path(value).expanduser()
    try:
        return path.read_bytes()
    except OSError as err:
        raise ContractKeyError(
            f"{env} names {path}, which cannot be read ({err.strerror or err}).",
            hint=f"Set {env} to PEM text or to the path of a readable PEM file.",
        ) from err


def _crypto() -> tuple[Any, Any]:
    """``cryptography``'s serialization and ed25519 modules, imported when first needed."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as err:
        raise ExtraMissing(
            "Ed25519 contract signatures need the 'sign' extra "
            f"({err.name or 'cryptography'} is not installed).",
            extra="sign",
            hint=f"Or sign with an HMAC secret in {ENV_HMAC}.",
        ) from err
    return serialization, ed25519


def _public_key_id(public: Any) -> str:
    serialization, _ = _crypto()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def _ed25519_verifier(public: Any, env: str) -> Verifier:
    from cryptography.exceptions import InvalidSignature

    def check(data: bytes, value: str) -> bool:
        try:
            public.verify(base64.b64decode(value, validate=True), data)
        except (InvalidSignature, ValueError):
            return False
        return True

    return Verifier("ed25519", _public_key_id(public), env, check)


def _ed25519_signer(pem: bytes) -> Signer:
    serialization, ed25519 = _crypto()
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError as err:  # an encrypted key
        raise ContractKeyError(
            f"{ENV_SIGNING} holds an encrypted private key; onnxgate reads unencrypted PEM only.",
            hint="Keep the key in your CI's secret store and give it unencrypted: "
            "`openssl pkey -in KEY -out PLAIN.pem`.",
        ) from err
    except ValueError as err:
        raise ContractKeyError(
            f"{ENV_SIGNING} is not a PEM private key ({err}).",
            hint="Make one with `openssl genpkey -algorithm ed25519 -out contract.key` and set "
            f"{ENV_SIGNING} to its path.",
        ) from err
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise ContractKeyError(
            f"{ENV_SIGNING} holds a {type(key).__name__.removeprefix('_')}; contracts are signed "
            "with Ed25519 keys.",
            hint="Make one with `openssl genpkey -algorithm ed25519 -out contract.key`.",
        )
    verifier = _ed25519_verifier(key.public_key(), ENV_SIGNING)

    def make(data: bytes) -> str:
        return base64.b64encode(key.sign(data)).decode("ascii")

    return Signer("ed25519", verifier.key_id, ENV_SIGNING, make, verifier)


def _ed25519_public(pem: bytes) -> Verifier:
    serialization, ed25519 = _crypto()
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError as err:
        raise ContractKeyError(
            f"{ENV_VERIFY} is not a PEM public key ({err}).",
            hint="Give the public half of the signing key: `openssl pkey -in contract.key -pubout "
            f"-out contract.pub`, and set {ENV_VERIFY} to its path.",
        ) from err
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise ContractKeyError(
            f"{ENV_VERIFY} holds a {type(key).__name__.removeprefix('_')}; contracts are signed "
            "with Ed25519 keys.",
            hint="Give the public half of an Ed25519 key (`openssl pkey -pubout`).",
        )
    return _ed25519_verifier(key, ENV_VERIFY)


def signer() -> Signer | None:
    """The signing key the environment configures, or None.

    Raises:
        ContractKeyError: both an HMAC secret and an Ed25519 key are set, or the one set is
            unreadable, too short, malformed or not Ed25519.
        ExtraMissing: an Ed25519 key is set and ``cryptography`` is not installed.
    """
    secret = _hmac_key()
    pem = _pem(ENV_SIGNING)
    if secret is not None and pem is not None:
        raise ContractKeyError(
            f"both {ENV_HMAC} and {ENV_SIGNING} are set; a contract is signed with one key.",
            hint="Unset one of them.",
        )
    if secret is not None:
        return _hmac_pair(secret)
    return _ed25519_signer(pem) if pem is not None else None


def verifiers() -> dict[str, Verifier]:
    """The verifying keys the environment configures, by algorithm.

    The HMAC secret; the Ed25519 public key, or else the public half of the signing key.

    Raises:
        ContractKeyError: a key that is set is unreadable, too short, malformed or not Ed25519.
        ExtraMissing: an Ed25519 key is set and ``cryptography`` is not installed.
    """
    found: dict[str, Verifier] = {}
    secret = _hmac_key()
    if secret is not None:
        found["hmac-sha256"] = _hmac_pair(secret).verifier
    public = _pem(ENV_VERIFY)
    if public is not None:
        found["ed25519"] = _ed25519_public(public)
    elif (private := _pem(ENV_SIGNING)) is not None:
        found["ed25519"] = _ed25519_signer(private).verifier
    return found


def signature_required(flag: bool) -> bool:
    """``--require-signature``, or ``ONNXGATE_REQUIRE_SIGNATURE`` set to 1/true/yes.

    Raises:
        ConfigError: the variable holds something else than 1/true/yes/0/false/no.
    """
    value = os.environ.get(ENV_REQUIRE, "").strip().lower()
    if value not in ("", "0", "false", "no", "1", "true", "yes"):
        raise ConfigError(
            f"{ENV_REQUIRE}={value!r}: expected 1, true, yes, 0, false or no.",
            hint=f"Unset {ENV_REQUIRE} or set it to 1.",
        )
    return flag or value in ("1", "true", "yes")


def sign(contract: Contract, by: Signer) -> Contract:
    """The contract with ``by``'s signature over everything but ``signing``.

    The contract is first read back from its JSON, so what is signed is what a reader will see.
    """
    contract = Contract.model_validate_json(contract.model_dump_json())
    data = canonical(contract)
    return contract.model_copy(
        update={
            "signing": Signing(
                algorithm=by.algorithm,  # type: ignore[arg-type]
                key_id=by.key_id,
                content_sha256=hashlib.sha256(data).hexdigest(),
                value=by.make(data),
            )
        }
    )


def sign_new(contract: Contract) -> Contract:
    """A contract just made from the model's bytes, signed when a signing key is configured.

    Raises:
        ContractKeyError: the configured key is unusable (see ``signer``).
    """
    by = signer()
    return sign(contract, by) if by is not None else contract


def holds(contract: Contract, verifier: Verifier) -> bool:
    """Whether the contract carries a signature that ``verifier`` accepts."""
    found = contract.signing
    return (
        found is not None
        and found.algorithm == verifier.algorithm
        and verifier.check(canonical(contract), found.value)
    )


def seal(contract: Contract, *, previous: bytes | None, where: str) -> Contract:
    """An updated contract as it should be kept: re-signed, left as it is, or with its signature dropped.

    With a signing key configured, the update is signed only when ``previous`` (the contract it
    replaces) carried that key's valid signature: a step that updates an edited contract never
    launders the edit with a fresh signature. Without one, a signature that no longer matches the
    content is dropped, and the log says how to sign again.

    Raises:
        ContractKeyError: the configured key is unusable (see ``signer``).
    """
    found = contract.signing
    if found is not None and found.content_sha256 == content_sha256(contract):
        return contract  # nothing signed changed
    by = signer()
    if by is not None:
        try:
            before = Contract.model_validate_json(previous) if previous is not None else None
        except ValueError:
            before = None
        if before is not None and holds(before, by.verifier):
            return sign(contract, by)
        log.warning(
            "%s: the contract it replaces carried no valid signature of the key in %s, so the "
            "update is written unsigned; check it with `onnxgate verify`, then sign it with "
            "`onnxgate contract sign`",
            where,
            by.env,
        )
    elif found is not None:
        log.warning(
            "%s: changed since it was signed and no signing key is configured, so its signature "
            "is dropped; sign it again with `onnxgate contract sign` where %s or %s is set",
            where,
            ENV_HMAC,
            ENV_SIGNING,
        )
    return contract.model_copy(update={"signing": None})


@dataclass(frozen=True)
class SignatureCheck:
    """What ``check_signature`` found: passed None when nothing could be checked."""

    passed: bool | None
    detail: str
    code: str | None = None
    hint: str | None = None


def check_signature(contract: Contract, *, require: bool) -> SignatureCheck:
    """The contract's signature held against the verifying keys the environment configures.

    Without a verifying key nothing is checked (passed None), unless ``require``. With one, the
    contract must carry a valid signature of it: unsigned is CON010, anything else CON011.

    Raises:
        ContractKeyMissing: ``require`` and no key is configured.
        ContractKeyError: a configured key is unusable (see ``verifiers``).
    """
    keys = verifiers()
    found = contract.signing
    if not keys:
        if require:
            raise ContractKeyMissing(
                f"a signature is required and no verifying key is configured: set {ENV_HMAC} "
                f"(HMAC secret) or {ENV_VERIFY} (Ed25519 public key).",
                hint="In CI, check that the secret is passed to this job.",
            )
        signed = f" (signed: {found.algorithm}, key {found.key_id})" if found else ""
        return SignatureCheck(None, f"not checked: no verifying key is configured{signed}")
    names = " or ".join(sorted({k.env for k in keys.values()}))
    if found is None:
        return SignatureCheck(
            False,
            f"the contract is not signed, and {names} asks for a signature",
            UNSIGNED,
            "Sign it where the signing key is: `onnxgate contract sign MODEL`.",
        )
    key = keys.get(found.algorithm)
    if key is None:
        return SignatureCheck(
            False,
            f"signed with {found.algorithm} (key {found.key_id}), and no {found.algorithm} key "
            f"is configured (only {names})",
            BAD_SIGNATURE,
            f"Set {ENV_HMAC if found.algorithm == 'hmac-sha256' else ENV_VERIFY}.",
        )
    if key.check(canonical(contract), found.value):
        return SignatureCheck(True, f"{found.algorithm}, key {found.key_id}: valid")
    if found.content_sha256 != content_sha256(contract):
        why = "the contract was edited after it was signed"
    elif found.key_id != key.key_id:
        why = f"signed by another key ({found.key_id}; {key.env} is {key.key_id})"
    else:
        why = "the signature does not verify (damaged or forged)"
    return SignatureCheck(
        False,
        f"{found.algorithm} signature: {why}",
        BAD_SIGNATURE,
        "Do not use this contract; re-create it from the model where the signing key is.",
    )
