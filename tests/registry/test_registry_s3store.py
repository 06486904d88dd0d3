"""The artefact store in an S3 bucket (``--store s3://…``), against a real SeaweedFS server.

SeaweedFS checks signatures (a wrong secret is 403) and honours ``If-None-Match: *``; the
server is started once per session (``seaweedfs`` in conftest), each test gets a bucket.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

import seaweedfs as weed
from onnxgate.cli.registry_cmd import registry_app
from onnxgate.errors import ArtefactCorrupt, ConfigError, ExtraMissing, RegistryUnreachable
from onnxgate.gate._config import load_config
from onnxgate.registry import _s3store, open_registry
from onnxgate.registry._s3store import S3Store

from ._registry_helpers import gate_report, make_files

runner = CliRunner()


def _db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'registry.db'}"


def _client(url: str):
    return S3Store(url)._client


def test_register_fetch_and_verify_round_trip(s3_env, tmp_path):
    files = make_files(tmp_path / "run")
    with open_registry(_db(tmp_path), s3_env) as reg:
        assert reg.store.location.startswith(s3_env)
        version = reg.register("bert", files, gate_report(files), alias="champion")
        fetched = reg.fetch("bert@champion", tmp_path / "out")
        report = reg.fsck()
    for item in fetched.files:
        source = files[item.role]
        assert Path(item.path).read_bytes() == source.read_bytes()
        assert item.sha256 == version.artefacts[item.role]
    names = {Path(f.path).name for f in fetched.files}
    assert {"bert.onnx", "bert.contract.json", "bert.golden.npz", "m.golden.npz"} <= names
    assert report.problems == [] and report.blobs == 3 and report.orphans == []


def test_a_blob_over_the_single_put_limit_goes_up_in_parts(s3_env, tmp_path, monkeypatch):
    monkeypatch.setattr(_s3store, "SINGLE_PUT_LIMIT", 1024)
    files = make_files(tmp_path / "run", size=8192)
    with open_registry(_db(tmp_path), s3_env) as reg:
        reg.register("big", files, gate_report(files))
        fetched = reg.fetch("big@1", tmp_path / "out")
    for item in fetched.files:
        assert Path(item.path).read_bytes() == files[item.role].read_bytes()


@pytest.mark.parametrize("limit", [1 << 30, 1024], ids=["single", "multipart"])
def test_a_file_changing_while_stored_leaves_no_object(s3_env, tmp_path, monkeypatch, limit):
    monkeypatch.setattr(_s3store, "SINGLE_PUT_LIMIT", limit)
    source = tmp_path / "model.onnx"
    source.write_bytes(b"x" * 4096)
    claimed = hashlib.sha256(b"y" * 4096).hexdigest()  # what it hashed to "before"
    store = S3Store(s3_env)
    key = store._key(claimed)
    with pytest.raises(ArtefactCorrupt, match="changed while it was being stored"):
        store._upload(source, key, claimed, 4096, replace=False)
    assert store.size(claimed) is None
    assert [item for item in store.list_blobs()] == []


def test_identical_bytes_from_concurrent_registrations_are_stored_once(s3_env, tmp_path):
    files = make_files(tmp_path / "run")
    errors: list[BaseException] = []
    numbers: list[int] = []

    def register() -> None:
        try:
            with open_registry(_db(tmp_path), s3_env) as reg:
                numbers.append(reg.register("bert", files, gate_report(files)).number)
        except BaseException as err:  # noqa: BLE001 (reported below)
            errors.append(err)

    threads = [threading.Thread(target=register) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(numbers) == [1, 2, 3, 4]
    store = S3Store(s3_env)
    assert sorted(item.name for item in store.list_blobs()) == sorted(
        hashlib.sha256(p.read_bytes()).hexdigest() for p in files.values()
    )
    # the create is conditional: a second writer of a stored key is told, not obeyed
    digest = hashlib.sha256(files["model"].read_bytes()).hexdigest()
    size = files["model"].stat().st_size
    assert store._upload(files["model"], store._key(digest), digest, size, replace=False) is False
    # a registration that relied on stored blobs left leases for fsck's grace period
    assert {item.name for item in store.list_leftovers()} >= {digest}


def test_a_corrupted_object_is_caught_on_fetch_and_by_fsck(s3_env, tmp_path):
    import obstore

    files = make_files(tmp_path / "run")
    with open_registry(_db(tmp_path), s3_env) as reg:
        version = reg.register("bert", files, gate_report(files))
        digest = version.artefacts["model"]
        damaged = bytearray(files["model"].read_bytes())
        damaged[100] ^= 0xFF
        obstore.put(_client(s3_env), f"sha256/{digest[:2]}/{digest}", bytes(damaged))
        with pytest.raises(ArtefactCorrupt, match=digest):
            reg.fetch("bert@1", tmp_path / "out")
        assert not (tmp_path / "out" / "bert.onnx").exists()
        report = reg.fsck()
    assert [(p.kind, p.where) for p in report.problems] == [("bad-sha256", "bert@1 model")]


def test_fsck_remove_spares_orphans_within_the_grace_period(s3_env, tmp_path, monkeypatch):
    orphan = tmp_path / "orphan.bin"
    orphan.write_bytes(b"orphan bytes")
    with open_registry(_db(tmp_path), s3_env) as reg:
        files = make_files(tmp_path / "run")
        reg.register("bert", files, gate_report(files))
        blob = reg.store.put(orphan)
        kept = reg.fsck(remove=True, min_age=3600)
        assert kept.orphans == [blob.sha256] and kept.removed == []
        # an hour on: the orphan (blob and lease) is past the grace period
        later = _s3store.time.time() + 7200
        monkeypatch.setattr(S3Store, "_clock", lambda self: lambda: later)
        gone = reg.fsck(remove=True, min_age=3600)
        monkeypatch.undo()
        assert gone.orphans == [blob.sha256]
        assert any(blob.sha256 in where for where in gone.removed)
        after = reg.fsck()
    assert after.orphans == [] and after.problems == [] and after.blobs == 3
    assert reg.store.has(blob.sha256) is False


def test_fsck_measures_ages_on_the_services_clock_not_this_hosts(s3_env, tmp_path, monkeypatch):
    """A host whose clock runs two hours ahead still sees a fresh orphan as fresh."""
    orphan = tmp_path / "orphan.bin"
    orphan.write_bytes(b"fresh orphan")
    with open_registry(_db(tmp_path), s3_env) as reg:
        blob = reg.store.put(orphan)
        ahead = _s3store.time.time() + 7200
        monkeypatch.setattr(_s3store.time, "time", lambda: ahead)
        report = reg.fsck(remove=True, min_age=3600)
        monkeypatch.undo()
        assert report.orphans == [blob.sha256] and report.removed == []
        assert reg.store.has(blob.sha256)
        assert [o.name for o in reg.store.list_leftovers() if "/clock/" in o.where] == []


def test_a_clock_probe_gone_before_it_is_read_is_not_a_crash(s3_env, tmp_path, monkeypatch):
    """Another `fsck --remove --min-age 0` may delete this fsck's probe between PUT and HEAD."""
    import obstore

    head = obstore.head

    def vanished(client, key):
        if key.startswith("clock/"):
            raise FileNotFoundError(key)
        return head(client, key)

    with open_registry(_db(tmp_path), s3_env) as reg:
        monkeypatch.setattr(obstore, "head", vanished)
        assert reg.fsck().consistent


def test_plain_http_without_allow_http_is_named_when_the_store_opens(s3_env, tmp_path, monkeypatch):
    monkeypatch.delenv("AWS_ALLOW_HTTP")
    with pytest.raises(ConfigError) as caught:
        open_registry(_db(tmp_path), s3_env)
    assert "AWS_ALLOW_HTTP=true" in caught.value.message


def test_a_fresh_lease_protects_an_old_orphan(monkeypatch):
    """The age fsck uses is the newer of the blob's and its lease's (S3 mtimes are fixed)."""
    now = datetime.now(UTC)
    digest = "ab" * 32
    listings = {
        "lease/": [{"path": f"lease/{digest}", "last_modified": now, "size": 10}],
        "sha256/": [
            {
                "path": f"sha256/ab/{digest}",
                "last_modified": now - timedelta(days=2),
                "size": 5,
            },
            {"path": "sha256/README", "last_modified": now, "size": 1},
        ],
    }
    store = S3Store.__new__(S3Store)
    store.url = "s3://bucket/p"
    monkeypatch.setattr(S3Store, "_clock", lambda self: _s3store.time.time)
    monkeypatch.setattr(S3Store, "_listing", lambda self, prefix: iter(listings[prefix]))
    leases = {meta["path"]: meta for meta in listings["lease/"]}
    monkeypatch.setattr(S3Store, "_head", lambda self, key: leases.get(key))
    blob, stray = sorted(store.list_blobs(), key=lambda item: not item.blob)
    assert blob.name == digest and blob.age < 3600
    assert stray.blob is False and stray.where == "s3://bucket/p/sha256/README"


def _fsck_cli(tmp_path: Path, store: str):
    return runner.invoke(registry_app, ["fsck", "--registry", _db(tmp_path), "--store", store])


def test_a_wrong_secret_is_exit_3_and_the_secret_shows_nowhere(
    s3_env, tmp_path, monkeypatch, caplog
):
    secret = "Wr0ngSecretThatMustNotLeak"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    caplog.set_level(logging.DEBUG)
    files = make_files(tmp_path / "run")
    with pytest.raises(RegistryUnreachable) as caught:
        with open_registry(_db(tmp_path), s3_env) as reg:
            reg.register("bert", files, gate_report(files))
    message = f"{caught.value.message} {caught.value.hint}"
    assert s3_env in message and "AWS_SECRET_ACCESS_KEY" in message
    result = _fsck_cli(tmp_path, s3_env)
    assert result.exit_code == 3, result.output
    assert s3_env in result.output
    for text in (message, result.output, caplog.text):
        assert secret not in text
    with open_registry(_db(tmp_path)) as reg:
        assert reg.models() == []


def test_an_unreachable_endpoint_is_exit_3_naming_it(s3_env, tmp_path, monkeypatch):
    endpoint = f"http://127.0.0.1:{weed.closed_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("ONNXGATE_S3_RETRIES", "1")
    result = _fsck_cli(tmp_path, s3_env)
    assert result.exit_code == 3, result.output
    assert endpoint in result.output and s3_env in result.output


def test_an_endpoint_that_never_answers_times_out_as_exit_3(s3_env, tmp_path, monkeypatch):
    import socket

    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("ONNXGATE_S3_TIMEOUT", "1")
        monkeypatch.setenv("ONNXGATE_S3_RETRIES", "0")
        result = _fsck_cli(tmp_path, s3_env)
    assert result.exit_code == 3, result.output
    assert endpoint in result.output and "ONNXGATE_S3_TIMEOUT" in result.output


def test_a_service_answering_5xx_is_retried_then_exit_3(s3_env, tmp_path, monkeypatch):
    """503 on every request: the listing (idempotent) is retried with backoff, then exit 3."""
    import http.server

    hits: list[str] = []

    class Failing(http.server.BaseHTTPRequestHandler):
        def _fail(self) -> None:
            hits.append(self.command)
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _fail

        def log_message(self, *args) -> None:  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("ONNXGATE_S3_RETRIES", "2")
        result = _fsck_cli(tmp_path, s3_env)
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit_code == 3, result.output
    assert endpoint in result.output and s3_env in result.output
    assert len(hits) >= 3, hits  # the first request and its two retries
    assert weed.SECRET_KEY not in result.output


def test_a_missing_bucket_says_how_to_create_it(s3_env, tmp_path):
    result = _fsck_cli(tmp_path, "s3://no-such-bucket-here/registry")
    assert result.exit_code == 3, result.output
    assert "s3 mb s3://no-such-bucket-here" in " ".join(result.output.split())


def test_a_store_dying_mid_registration_registers_nothing(tmp_path, monkeypatch):
    try:
        server = weed.start(tmp_path / "weed")
    except RuntimeError as err:
        pytest.fail(f"SeaweedFS could not start: {err}")
    try:
        for key, value in server.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("ONNXGATE_S3_RETRIES", "1")
        server.create_bucket("dying")
        files = make_files(tmp_path / "run")
        with open_registry(_db(tmp_path), "s3://dying/r") as reg:
            reg.register("early", files, gate_report(files))
        files = make_files(tmp_path / "run2")
        real_put = S3Store.put
        puts: list[str] = []

        def put_then_die(self, source):
            blob = real_put(self, source)
            puts.append(blob.sha256)
            server.stop()  # SIGKILL: the next blob's PUT meets a closed port
            return blob

        monkeypatch.setattr(S3Store, "put", put_then_die)
        with open_registry(_db(tmp_path), "s3://dying/r") as reg:
            with pytest.raises(RegistryUnreachable, match="s3://dying/r"):
                reg.register("bert", files, gate_report(files))
            assert len(puts) == 1
            assert [m.name for m in reg.models()] == ["early"]
            with pytest.raises(RegistryUnreachable, match="s3://dying/r"):  # a fetch, too
                reg.fetch("early@1", tmp_path / "out")
        assert not any(p.suffix == ".onnx" for p in (tmp_path / "out").glob("*"))
    finally:
        server.stop()


def test_a_gate_config_keeps_an_s3_store_url(tmp_path):
    (tmp_path / "gate.toml").write_text(
        "version = 1\n[model]\nname = 'm'\nsource = 'm.onnx'\n"
        '[register]\nstore = "s3://models/onnxgate"\n'
    )
    assert load_config(tmp_path / "gate.toml").registration.store == "s3://models/onnxgate"
    (tmp_path / "gate.toml").write_text(
        "version = 1\n[model]\nname = 'm'\nsource = 'm.onnx'\n[register]\nstore = 'blobs'\n"
    )
    assert load_config(tmp_path / "gate.toml").registration.store == str(tmp_path / "blobs")


@pytest.mark.parametrize(
    ("store", "said"),
    [
        ("gs://bucket/p", "gs://bucket/p is not an artefact store"),
        ("s3://AKIAKEY:sekret-in-url@bucket/p", "s3://***@bucket/p is not an S3 store URL"),
        ("s3://B/upper-case-bucket", "s3://B/upper-case-bucket is not an S3 store URL"),
        ("s3://bucket/p?X-Amz-Signature=sekret", "is not an S3 store URL"),
    ],
)
def test_a_store_url_onnxgate_cannot_use_is_a_usage_error(tmp_path, store, said):
    with pytest.raises(ConfigError) as caught:
        open_registry(_db(tmp_path), store)
    message = f"{caught.value.message} {caught.value.hint}"
    assert said in message and "sekret" not in message


def test_a_file_url_is_a_folder_store(tmp_path):
    with open_registry(_db(tmp_path), (tmp_path / "blobs").as_uri()) as reg:
        assert reg.store.location == str(tmp_path / "blobs")


def test_an_s3_store_without_obstore_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "obstore.store", None)  # import fails as when absent
    with pytest.raises(ExtraMissing) as caught:
        open_registry(_db(tmp_path), "s3://bucket/p")
    assert caught.value.extras == ["s3"] and "s3://bucket/p" in caught.value.message


def test_a_lease_written_while_fsck_lists_protects_the_blob(monkeypatch):
    """A registration relying on an old orphan after fsck's listing began: its lease is seen."""
    now = datetime.now(UTC)
    digest = "cd" * 32
    leases: dict[str, dict] = {}

    def listing(self, prefix):
        if prefix == "lease/":
            yield from list(leases.values())
            return
        # a registration finds the old blob present and leases it, as the listing runs
        leases[f"lease/{digest}"] = {"path": f"lease/{digest}", "last_modified": now, "size": 9}
        yield {"path": f"sha256/cd/{digest}", "last_modified": now - timedelta(days=2), "size": 5}

    store = S3Store.__new__(S3Store)
    store.url = "s3://bucket/p"
    monkeypatch.setattr(S3Store, "_clock", lambda self: _s3store.time.time)
    monkeypatch.setattr(S3Store, "_listing", listing)
    monkeypatch.setattr(S3Store, "_head", lambda self, key: leases.get(key))
    [blob] = store.list_blobs()
    assert blob.name == digest and blob.age < 3600
