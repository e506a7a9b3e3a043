"""The chaos run's own failure paths, without a cluster: a workload whose setup failed is
finished without joining threads it never started (it raised RuntimeError and ended the whole
soak instead of reporting one failed run), and the setup's create is asked again while the
cluster has no meta leader (a 10008 right after start failed a soak's run)."""

from pathlib import Path

import pytest

from appliance.bench.jsapi import ApiError, until_available
from appliance.bench.servers import APPLIANCE, RunningServer
from appliance.testing.chaos import Workload


def test_a_workload_that_never_started_finishes() -> None:
    workload = Workload(RunningServer(APPLIANCE, [], Path(".")), publishers=2)
    workload.finish()
    assert workload.stop.is_set() and workload.acked == set()


def test_a_create_is_asked_again_while_there_is_no_meta_leader_only() -> None:
    unavailable = ApiError("JetStream system temporarily unavailable", code=503, err_code=10008)
    answers: list[Exception | None] = [unavailable, TimeoutError("no answer"), None]
    calls = []

    def create() -> object:
        calls.append(1)
        answer = answers.pop(0)
        if answer is not None:
            raise answer
        return {}

    until_available(create)
    assert len(calls) == 3

    def refused() -> object:
        raise ApiError("stream name already in use with a different configuration", code=400, err_code=10058)

    with pytest.raises(ApiError, match="stream name already in use"):
        until_available(refused)  # any other error is the run's failure at once
