"""A contract that cannot be hollowed out: hostile edits that keep the sha256 fields right.

Each test replays one way an edited contract used to pass ``verify`` (issue 17): a ``model`` field
naming another file, emptied golden outputs, a vacuous rule, negative dims, a non-UTF-8 file
name; then signing, which refuses an edit even when every sha256 in the contract was updated.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from models import mlp, model, save, value
from onnxgate.cli import app
from onnxgate.contract import (
    SIDECAR,
    ContractConfig,
    OutputRule,
    VerifyConfig,
    canonical,
    contract_paths,
    init_contract,
    load_contract,
    sign_contract,
    verify,
)
from onnxgate.contract._hollow import Extent, rule_findings
from onnxgate.contract_store import file_name, same_name, stored_name
from onnxgate.errors import (
    ArtefactCorrupt,
    ContractKeyError,
    ContractKeyMissing,
    HollowContract,
    ModelLoadError,
)

runner = CliRunner()
ONNXGATE = Path(sys.executable).with_name("onnxgate")
HMAC_KEY = "k" * 32


@pytest.fixture
def contracted(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    path = save(mlp(), folder / "mlp.onnx")
    init_contract(path, ContractConfig(second_opinion=False))
    return path


def other_mlp() -> onnx.ModelProto:
    """The mlp with other weights: the model an attacker puts in the real one's place."""
    proto = mlp()
    for tensor in proto.graph.initializer:
        if tensor.name == "W":
            tensor.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(tensor) + 0.5, "W"))
    return proto


def edit(path: Path, change) -> None:
    contract_file, _ = contract_paths(path)
    document = json.loads(contract_file.read_text())
    change(document)
    contract_file.write_text(json.dumps(document))


def swap_model(path: Path) -> None:
    """Replace the model's bytes and update the contract's sha256 and size to the new ones."""
    save(other_mlp(), path)
    data = path.read_bytes()

    def update(document):
        document["identity"]["model"]["sha256"] = hashlib.sha256(data).hexdigest()
        document["identity"]["model"]["size"] = len(data)

    edit(path, update)


def codes(error: HollowContract) -> set[str]:
    return {code for code, _ in error.findings}


def cli(*args: str):
    return runner.invoke(app, [*args])


# --- which file the contract is about ----------------------------------------------------------


def test_a_contract_naming_another_model_beside_it_fails_identity(contracted):
    folder = contracted.parent
    evil = save(other_mlp(), folder / "evil.onnx")
    init_contract(evil, ContractConfig(second_opinion=False))
    assert verify(evil).passed  # a contract of its own: fine

    def name_the_good_one(document):
        document["model"] = "mlp.onnx"
        document["identity"]["model"]["path"] = "mlp.onnx"

    edit(evil, name_the_good_one)
    report = verify(evil)
    assert report.passed is False and report.identity.passed is False
    assert "CON001" in report.identity.reason and "mlp.onnx" in report.identity.reason
    assert [f.code for f in report.findings] == ["CON001"]
    assert all(r.parity.passed is None for r in report.results)  # nothing ran

    result = cli("verify", str(evil), "--format", "json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["findings"][0]["code"] == "CON001"


def test_a_contract_whose_identity_describes_another_name_fails(contracted):
    edit(contracted, lambda d: d["identity"]["model"].update(path="other.onnx"))
    report = verify(contracted)
    assert report.passed is False and "CON001" in report.identity.reason


def test_a_model_name_that_is_a_path_is_refused(contracted):
    def elsewhere(document):
        document["model"] = "../models/mlp.onnx"
        document["identity"]["model"]["path"] = "../models/mlp.onnx"

    edit(contracted, elsewhere)
    report = verify(contracted)
    assert report.passed is False and "not a plain file name" in report.identity.reason


def test_a_model_renamed_with_its_contract_still_verifies_by_its_bytes(contracted, tmp_path):
    """``registry fetch`` and ``deploy`` rename the model and keep the contract's bytes."""
    out = tmp_path / "fetched"
    out.mkdir()
    contract_file, golden_file = contract_paths(contracted)
    shutil.copy(contracted, out / "resnet.onnx")
    shutil.copy(contract_file, out / "resnet.contract.json")
    shutil.copy(golden_file, out / golden_file.name)
    report = verify(out / "resnet.onnx")
    assert report.passed, report.identity.reason
    assert report.findings == []


def test_a_link_to_the_model_is_the_model(contracted):
    link = contracted.with_name("latest.onnx")
    link.symlink_to(contracted.name)
    contract_file, _ = contract_paths(contracted)
    contract_paths(link)[0].symlink_to(contract_file.name)
    assert verify(link).passed


# --- hollow contracts --------------------------------------------------------------------------


def test_a_swapped_model_with_updated_sha_fails_parity(contracted):
    """The baseline the hollowing edits below hide: the other weights are caught by parity."""
    swap_model(contracted)
    report = verify(contracted)
    assert report.identity.passed and report.passed is False
    assert report.results[0].parity.passed is False


def test_emptied_golden_outputs_are_refused(contracted):
    swap_model(contracted)

    def empty(document):
        for sample in document["golden"]["samples"]:
            sample["outputs"] = []

    edit(contracted, empty)
    with pytest.raises(HollowContract, match="compares no output") as caught:
        verify(contracted)
    assert codes(caught.value) == {"CON003"}

    result = cli("verify", str(contracted), "--format", "json")
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    assert document["error"] == "hollow-contract"
    assert [f["code"] for f in document["findings"]] == ["CON003"] * 3  # one per sample
    text = cli("verify", str(contracted))
    assert text.exit_code == 2 and "CON003" in text.output


def test_golden_outputs_emptied_in_the_golden_file_are_refused(contracted):
    """The arrays themselves emptied, the golden file's sha256 updated."""
    _, golden_file = contract_paths(contracted)
    with np.load(golden_file) as archive:
        arrays = {k: archive[k] for k in archive.files}
    arrays = {k: v[:0] if "/out/" in k else v for k, v in arrays.items()}
    np.savez(golden_file, **arrays)
    sha = hashlib.sha256(golden_file.read_bytes()).hexdigest()
    edit(contracted, lambda d: d["golden"].update(sha256=sha))
    with pytest.raises(HollowContract, match="compares only empty arrays") as caught:
        verify(contracted)
    assert codes(caught.value) == {"CON003"}


def test_every_output_skipped_is_refused(contracted):
    def skip_all(document):
        document["golden"]["skipped_outputs"] = ["y"]
        for sample in document["golden"]["samples"]:
            sample["outputs"] = []

    edit(contracted, skip_all)
    with pytest.raises(HollowContract) as caught:
        verify(contracted)
    assert codes(caught.value) == {"CON003"}


def two_outputs() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="relu"),
        helper.make_node("Neg", ["x"], ["z"], name="neg"),
    ]
    return model(nodes, [value("x")], [value("y"), value("z")])


def test_an_output_dropped_from_the_samples_is_refused(tmp_path):
    path = save(two_outputs(), tmp_path / "two.onnx")
    init_contract(path, ContractConfig(second_opinion=False))
    assert verify(path).passed

    def drop_z(document):
        for sample in document["golden"]["samples"]:
            sample["outputs"].remove("z")

    edit(path, drop_z)
    with pytest.raises(HollowContract, match="does not compare output z") as caught:
        verify(path)
    assert codes(caught.value) == {"CON004"}
    # listed as skipped, it is a declared omission (quantize keeps only the gated outputs)
    edit(path, lambda d: d["golden"].update(skipped_outputs=["z"]))
    assert verify(path).passed


def test_a_contract_without_golden_samples_is_refused(contracted):
    edit(contracted, lambda d: d.update(golden=None))
    with pytest.raises(HollowContract) as caught:
        verify(contracted)
    assert codes(caught.value) == {"CON002"}


def test_an_emptied_sample_list_is_not_a_valid_contract(contracted):
    edit(contracted, lambda d: d["golden"].update(samples=[]))
    with pytest.raises(ModelLoadError, match="not a valid contract"):
        verify(contracted)


@pytest.mark.parametrize(
    "rule",
    [
        {"metric": "cosine>=-1"},
        {"metric": "cosine<=1"},
        {"metric": "top1>=0"},
        {"metric": "max_abs<=100"},
        {"metric": "mismatch_fraction<=1"},
        {"metric": "mismatches<=1000"},
        {"metric": "p99_abs<5"},
        {"atol": 1e9},
    ],
)
def test_a_vacuous_rule_is_refused_unless_weak_rules_are_admitted(contracted, rule):
    swap_model(contracted)
    edit(contracted, lambda d: d["golden"]["rules"][0].update(rule))
    with pytest.raises(HollowContract, match="weaker than the floor") as caught:
        verify(contracted)
    assert codes(caught.value) == {"CON006"}
    # admitted knowingly, the weak rule is reported, and it lets the other weights through
    report = verify(contracted, VerifyConfig(allow_weak_rules=True))
    assert [(f.code, f.allowed) for f in report.findings] == [("CON006", True)]
    assert report.passed


def test_rules_at_their_floor_are_accepted_and_a_hair_below_are_not():
    extents = {"y": Extent(elements=300, scale=2.0)}
    at_floor = [
        OutputRule(output="y", atol=0.2, rtol=0.1),  # 10% of the largest |y|; 10%
        OutputRule(output="y", atol=5.0, rtol=5.0, metric="cosine>=0.9"),  # the metric judges
        OutputRule(output="y", atol=0.0, rtol=0.0, metric="top1>0.95"),
        OutputRule(output="y", atol=0.0, rtol=0.0, metric="mismatches<=3"),  # 1% of 300
        OutputRule(output="y", atol=0.0, rtol=0.0, metric="max_abs<0.2"),
    ]
    assert rule_findings(at_floor, extents) == []
    below = [
        OutputRule(output="y", atol=0.0, rtol=0.0, metric="mismatches<=4"),
        OutputRule(output="y", atol=0.21, rtol=0.0),
        OutputRule(output="y", atol=0.0, rtol=0.11),
        OutputRule(output="y", atol=0.0, rtol=0.0, metric="cosine>0.89"),
        OutputRule(output="y", atol=0.0, rtol=0.0, metric="max_abs>=0"),  # the wrong way
    ]
    assert [f.code for f in rule_findings(below, extents)] == ["CON006"] * 5
    # an output of zeros: absolute tolerances keep their least floor, 0.01
    zeros = {"y": Extent(elements=300, scale=0.0)}
    assert rule_findings([OutputRule(output="y", atol=0.01, rtol=0.0)], zeros) == []
    assert len(rule_findings([OutputRule(output="y", atol=0.02, rtol=0.0)], zeros)) == 1


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        (lambda d: d["golden"]["samples"][0]["dims"].update(batch=-1), "batch=-1"),
        (lambda d: d["golden"]["samples"][0]["dims"].update(batch=0), "batch=0"),
        (lambda d: d["golden"]["samples"][1]["dims"].update(batch=3), "has 32 there"),
        (lambda d: d["signature"]["dims"]["batch"].update(min=-4), "at least 1"),
        (lambda d: d["signature"]["dims"]["batch"].update(min=9, max=2), "above max"),
        (lambda d: d["signature"]["dims"]["batch"].update(max=5), "outside"),
    ],
)
def test_impossible_dims_are_refused(contracted, change, phrase):
    swap_model(contracted)
    edit(contracted, change)
    with pytest.raises(HollowContract, match=phrase) as caught:
        verify(contracted)
    assert codes(caught.value) == {"CON005"}


def test_contract_init_never_writes_a_contract_verify_refuses(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    result = cli("contract", "init", str(path), "--tol", "y:0.5,0", "--format", "json")
    assert result.exit_code == 2
    assert [f["code"] for f in json.loads(result.stdout)["findings"]] == ["CON006"]
    assert not any(p.exists() for p in contract_paths(path))

    written = cli("contract", "init", str(path), "--tol", "y:0.5,0", "--allow-weak-rules")
    assert written.exit_code == 0, written.output
    assert cli("verify", str(path)).exit_code == 2
    admitted = cli("verify", str(path), "--allow-weak-rules")
    assert admitted.exit_code == 0, admitted.output
    assert "CON006 admitted" in admitted.output


def test_weak_rules_are_refused_in_the_words_of_the_interface_in_use(tmp_path):
    # the command offers its flag to admit them; a gate has no such key, and names the table
    # its rules are set in
    path = save(mlp(), tmp_path / "mlp.onnx")
    result = cli("contract", "init", str(path), "--tol", "y:0.5,0", "--format", "json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["hint"] == (
        "Tighten the rules and re-create the contract, or admit them knowingly with "
        "--allow-weak-rules."
    )
    from onnxgate.gate import run_gate

    config = tmp_path / "gate.toml"
    config.write_text(
        'version = 1\n[model]\nname = "mlp"\nsource = "mlp.onnx"\n'
        "[steps.export.tolerances]\nper_output = { y = [0.5, 0] }\n"
        + "".join(
            f"[steps.{step}]\nenabled = false\n"
            for step in ("check", "compare", "verify", "placement", "tune", "bench")
        )
    )
    export = run_gate(config, register=False, cache=False).step("export")
    assert export.status == "error" and export.exit_code == 2, export.reason
    assert "CON006 rule for y: atol=0.5 is weaker than the floor" in export.summary
    assert export.reason.endswith(
        "(Tighten the rules (steps.export.tolerances) and re-create the contract.)"
    )
    assert "allow-weak-rules" not in export.reason
    assert "allow_weak_rules" not in export.reason


# --- file names that are not UTF-8 -------------------------------------------------------------


def test_stored_names_round_trip_and_compare_as_bytes():
    name = os.fsdecode(b"m\xff\\x.onnx")
    stored = stored_name(name)
    assert stored == "m\\xff\\\\x.onnx"
    assert file_name(stored) == name and same_name(stored, name)
    assert stored_name("mlp.onnx") == "mlp.onnx"  # every UTF-8 name is stored as it is
    for bad in ("a\\x41", "a\\", "a\\q"):
        with pytest.raises(ValueError, match="backslash"):
            file_name(bad)


def test_a_model_named_in_bytes_that_are_not_utf8_works_end_to_end(tmp_path):
    folder = os.fsencode(tmp_path)
    path = os.path.join(folder, b"m\xff.onnx")
    onnx.save_model(mlp(), os.fsdecode(path))
    env = dict(os.environ)  # without contract keys (tests/conftest.py)
    for command in ([b"contract", b"init", path], [b"verify", path, b"--format", b"json"]):
        done = subprocess.run(
            [os.fsencode(ONNXGATE), *command], capture_output=True, env=env, timeout=300
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")
    report = json.loads(done.stdout)
    assert report["passed"] and report["model"].endswith("m\\xff.onnx")
    contract_file = os.path.join(folder, b"m\xff.contract.json")
    document = json.loads(Path(os.fsdecode(contract_file)).read_text())
    assert document["model"] == "m\\xff.onnx"
    assert document["golden"]["file"] == "m\\xff.golden.npz"
    assert os.path.isfile(os.path.join(folder, b"m\xff.golden.npz"))


# --- signatures ---------------------------------------------------------------------------------


def test_an_hmac_signed_contract_verifies(contracted, monkeypatch):
    monkeypatch.setenv("ONNXGATE_CONTRACT_KEY", HMAC_KEY)
    contract = init_contract(contracted, ContractConfig(second_opinion=False, force=True))
    assert contract.signing is not None and contract.signing.algorithm == "hmac-sha256"
    assert load_contract(contracted).signing == contract.signing
    report = verify(contracted)
    assert report.passed and report.signature.passed is True


def test_an_edit_with_updated_sha_fails_an_hmac_signature(contracted, monkeypatch):
    monkeypatch.setenv("ONNXGATE_CONTRACT_KEY", HMAC_KEY)
    init_contract(contracted, ContractConfig(second_opinion=False, force=True))
    signed = load_contract(contracted).signing
    # the attacker has no key: a contract of their own model, with the old signature copied in
    monkeypatch.delenv("ONNXGATE_CONTRACT_KEY")
    save(other_mlp(), contracted)
    init_contract(contracted, ContractConfig(second_opinion=False, force=True))
    assert verify(contracted).passed  # without a key, nothing tells it from the real one
    edit(contracted, lambda d: d.update(signing=signed.model_dump()))

    monkeypatch.setenv("ONNXGATE_CONTRACT_KEY", HMAC_KEY)
    report = verify(contracted)
    assert report.passed is False and report.identity.passed is False
    assert report.signature.passed is False
    assert (
        "CON011" in report.identity.reason
        and "edited after it was signed" in report.identity.reason
    )
    result = cli("verify", str(contracted), "--format", "json")
    assert result.exit_code == 1
    assert [f["code"] for f in json.loads(result.stdout)["findings"]] == ["CON011"]


def test_a_rule_edited_in_a_signed_contract_fails(contracted, monkeypatch):
    monkeypatch.setenv("ONNXGATE_CONTRACT_KEY", HMAC_KEY)
    init_contract(contracted, ContractConfig(second_opinion=False, force=True))
    edit(contracted, lambda d: d["golden"]["rules"][0].update(rtol=0.001))
    report = verify(contracted)
    assert report.passed is False and "CON011" in report.identity.reason


def test_an_unsigned_contract_fails_when_a_key_is_configured(contracted, monkeypatch):
    monkeypatch.setenv("ONNXGATE_CONTRACT_KEY", HMAC_KEY)
    report = verify(contracted)
    assert report.passed is False and "CON010" in report.identity.reason
    assert [f.code for f in report.findings] == ["CON010"]


def test_another_hmac_key_fails(contracted, monkeypatch):
    monkeypatch.setenv("ONNXGATE_CONTRACT_KEY", HMAC_KEY)
    init_contract(contracted, ContractConfig(second_opinion=False, force=True))
    monkeypatch.setenv("ONNXGATE_CONTRACT_KEY", "x" * 32)
    report = verify(contracted)
    assert report.passed is False and "signed by another key" in report.identity.reason


def test_require_signature_without_a_key_is_exit_3(contracted, monkeypatch):
    with pytest.raises(ContractKeyMissing, match="ONNXGATE_CONTRACT_KEY"):
        verify(contracted, VerifyConfig(require_signature=True))
    assert cli("verify", str(contracted), "--require-signature").exit_code == 3
    monkeypatch.setenv("ONNXGATE_REQUIRE_SIGNATURE", "1")
    assert cli("verify", str(contracted)).exit_code == 3


def _ed25519_pair(folder: Path, name: str) -> tuple[Path, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    private = folder / f"{name}.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public.decode()


def test_an_ed25519_signature_verifies_with_the_public_key_only(contracted, monkeypatch, tmp_path):
    private, public = _ed25519_pair(tmp_path, "ci")
    _, stranger = _ed25519_pair(tmp_path, "stranger")
    monkeypatch.setenv("ONNXGATE_CONTRACT_SIGNING_KEY", str(private))
    contract = init_contract(contracted, ContractConfig(second_opinion=False, force=True))
    assert contract.signing.algorithm == "ed25519"

    monkeypatch.delenv("ONNXGATE_CONTRACT_SIGNING_KEY")
    monkeypatch.setenv("ONNXGATE_CONTRACT_VERIFY_KEY", public)
    assert verify(contracted).passed
    monkeypatch.setenv("ONNXGATE_CONTRACT_VERIFY_KEY", stranger)
    report = verify(contracted)
    assert report.passed is False and "signed by another key" in report.identity.reason

    monkeypatch.setenv("ONNXGATE_CONTRACT_VERIFY_KEY", public)
    swap_model(contracted)  # the other weights, with the sha256 updated
    report = verify(contracted)
    assert report.passed is False and "edited after it was signed" in report.identity.reason


def test_a_key_of_the_wrong_type_names_its_variable(contracted, monkeypatch, tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ec_key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    monkeypatch.setenv("ONNXGATE_CONTRACT_SIGNING_KEY", ec_key.decode())
    with pytest.raises(ContractKeyError, match="ONNXGATE_CONTRACT_SIGNING_KEY .*Ed25519"):
        verify(contracted)
    result = cli("contract", "sign", str(contracted))
    assert result.exit_code == 2 and "ONNXGATE_CONTRACT_SIGNING_KEY" in result.output

    monkeypatch.setenv("ONNXGATE_CONTRACT_SIGNING_KEY", str(tmp_path / "missing.pem"))
    with pytest.raises(ContractKeyError, match="cannot be read"):
        verify(contracted)
    monkeypatch.delenv("ONNXGATE_CONTRACT_SIGNING_KEY")
    monkeypatch.setenv("ONNXGATE_CONTRACT_KEY", "short")
    with pytest.raises(ContractKeyError, match="ONNXGATE_CONTRACT_KEY holds 5 bytes"):
        verify(contracted)


def test_contract_sign_signs_an_existing_contract(contracted, monkeypatch):
    assert cli("contract", "sign", str(contracted)).exit_code == 3  # no key
    monkeypatch.setenv("ONNXGATE_CONTRACT_KEY", HMAC_KEY)
    assert verify(contracted).passed is False  # unsigned
    result = cli("contract", "sign", str(contracted))
    assert result.exit_code == 0, result.output
    assert "hmac-sha256" in result.output
    assert verify(contracted).passed


def test_contract_sign_refuses_a_contract_its_files_do_not_match(contracted, monkeypatch):
    monkeypatch.setenv("ONNXGATE_CONTRACT_KEY", HMAC_KEY)
    save(other_mlp(), contracted)
    with pytest.raises(ArtefactCorrupt, match="not signed"):
        sign_contract(contracted)
    assert load_contract(contracted).signing is None


def test_an_update_keeps_a_valid_signature_and_never_launders_an_edit(contracted, monkeypatch):
    """``tune`` updates a contract through the store: re-signed only if it was validly signed."""
    monkeypatch.setenv("ONNXGATE_CONTRACT_KEY", HMAC_KEY)
    init_contract(contracted, ContractConfig(second_opinion=False, force=True))
    contract = load_contract(contracted)
    updated = contract.model_copy(update={"lineage": {"note": "tuned"}})
    SIDECAR.write(contracted, updated)
    assert verify(contracted).passed
    assert load_contract(contracted).lineage == {"note": "tuned"}

    edit(contracted, lambda d: d["golden"]["rules"][0].update(rtol=0.001))  # no key: an edit
    edited = load_contract(contracted)
    SIDECAR.write(contracted, edited.model_copy(update={"lineage": {"note": "again"}}))
    assert load_contract(contracted).signing is None
    assert "CON010" in verify(contracted).identity.reason

    # without a key, a signature the update voids is dropped, not left to fail as "edited"
    sign_contract(contracted)
    monkeypatch.delenv("ONNXGATE_CONTRACT_KEY")
    signed = load_contract(contracted)
    SIDECAR.write(contracted, signed.model_copy(update={"lineage": {"note": "third"}}))
    assert load_contract(contracted).signing is None


def test_the_signed_bytes_are_deterministic_and_cover_the_golden_file(contracted):
    contract = load_contract(contracted)
    assert canonical(contract) == canonical(load_contract(contracted))
    assert canonical(contract) == canonical(contract.model_copy(update={"signing": None}))
    other = contract.model_copy(
        update={"golden": contract.golden.model_copy(update={"sha256": "0" * 64})}
    )
    assert canonical(other) != canonical(contract)
    assert np.frombuffer(canonical(contract), np.uint8).max() < 128  # ASCII only
    # a timestamp made this second is content like any other (not a default to leave out)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    fresh = contract.provenance.model_copy(update={"created": now})
    assert f'"created":"{now}"'.encode() in canonical(
        contract.model_copy(update={"provenance": fresh})
    )


def test_fields_left_at_their_default_do_not_void_a_signature(contracted, monkeypatch):
    """A contract written before a field existed reads the same as one with it at its default."""
    monkeypatch.setenv("ONNXGATE_CONTRACT_KEY", HMAC_KEY)
    init_contract(contracted, ContractConfig(second_opinion=False, force=True))

    def drop_defaults(document):
        del document["performance"], document["lineage"], document["provenance"]["lineage"]

    edit(contracted, drop_defaults)
    assert verify(contracted).passed
