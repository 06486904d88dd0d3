"""Another host is a real test: register on one "host", serve on another.

The registering process and the serving process share nothing but the PostgreSQL registry and
the S3 bucket (SeaweedFS on 127.0.0.1): each has its own working folder and cache folder, and
the registering one's folder is gone before the server starts. The server fetches the version
from the bucket, re-checks every sha256, proves the model and answers tritonclient.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .conftest import pg_schema_url

pytestmark = pytest.mark.postgres

TESTS = Path(__file__).resolve().parents[1]
REGISTER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from serve._serve_helpers import register
print(register(sys.argv[1], Path("tok.onnx"), alias="champion").number)
"""


def test_a_version_registered_on_one_host_is_served_from_another(pg_admin, s3_env, tmp_path):
    import tritonclient.http as httpclient

    from serve._serve_helpers import ServerProcess, make_token_contract, reference_logits

    url = pg_schema_url(pg_admin)
    shared = {"ONNXGATE_STORE": s3_env, "ONNXGATE_REGISTRY": url}
    host_a, host_b = tmp_path / "a", tmp_path / "b"
    model = make_token_contract(host_a / "tok.onnx", seed=7)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, size=(2, 6), dtype=np.int64)
    mask = np.ones_like(ids)
    expected = reference_logits(model, ids, mask)
    done = subprocess.run(
        [sys.executable, "-c", REGISTER, url, str(TESTS)],
        cwd=host_a,
        env={**os.environ, **shared, "ONNXGATE_CACHE_DIR": str(host_a / "cache")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["1"]
    shutil.rmtree(host_a)  # nothing of host A's files is left for host B

    host_b.mkdir()
    cache = host_b / "cache"
    server = ServerProcess(["tok@champion"], host_b, {**shared, "ONNXGATE_CACHE_DIR": str(cache)})
    try:
        server.wait_live()
        client = httpclient.InferenceServerClient(server.http)
        inputs = [httpclient.InferInput("ids", list(ids.shape), "INT64"),
                  httpclient.InferInput("mask", list(mask.shape), "INT64")]  # fmt: skip
        inputs[0].set_data_from_numpy(ids)
        inputs[1].set_data_from_numpy(mask)
        answer = client.infer("tok", inputs)
        np.testing.assert_allclose(answer.as_numpy("logits"), expected, rtol=1e-5, atol=1e-6)
        assert answer.get_response()["model_version"] == "1"
    finally:
        code = server.stop()
    assert code == 0 and "Traceback" not in server.text(), server.text()[-4000:]
    assert (cache / "serve" / "tok@1" / "tok.onnx").is_file()
    assert not host_a.exists()
