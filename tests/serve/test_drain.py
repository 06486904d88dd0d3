"""SIGTERM drains both protocols: every request already accepted is answered, REST included
(bodies still arriving included); requests that arrive after the signal get 503 with Retry-After.
"""

from __future__ import annotations

import pytest

from ._drain import make_wide_contract, run_drain


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory: pytest.TempPathFactory):
    return make_wide_contract(tmp_path_factory.mktemp("wide") / "wide.onnx")


def test_sigterm_answers_every_request_in_flight_on_both_protocols(start_server, wide_model):
    server = start_server(str(wide_model), "--allow-ungated", "--grace", "60")
    result = run_drain(server, rest=64, grpc=64, held_back=8, late=2)
    summary = (result.rest.as_dict(), result.grpc.as_dict(), result.late.as_dict())
    assert result.written_before_signal == 64, summary
    assert result.rest.counts["answered"] == 64, summary
    assert result.grpc.counts["answered"] == 64, summary
    # after the signal, a new request is refused cleanly, with a hint when to retry
    assert result.late.counts["refused"] == 2, summary
    assert result.late.retry_after == 2, summary
    assert result.exit_code == 0, server.text()
