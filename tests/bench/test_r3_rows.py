"""The R3 rows of `make bench` and how `--only`/`--quick` pick what runs (no servers)."""

import click
import pytest
from click.testing import CliRunner

from appliance.bench import compare
from appliance.bench.failover import FailoverResult
from appliance.bench.scenarios import FAILOVER_KEY, SCENARIOS
from appliance.bench.servers import APPLIANCE, NATS_DEFAULT, NATS_SYNC_ALWAYS

BY_KEY = {s.key: s for s in SCENARIOS}


@pytest.mark.parametrize("client_on", ["leader", "follower"])
@pytest.mark.parametrize("tag,size", [("", 128), ("-1k", 1024)])
def test_every_issue_row_runs_r3_on_three_nodes_with_the_client_placed(tag: str, size: int, client_on: str) -> None:
    rows = {kind: BY_KEY[f"r3-{kind}{tag}-{client_on}"] for kind in
            ("js-pub-async", "js-pub-sync", "js-fetch-explicit", "js-fetch-all")}
    for row in rows.values():
        assert (row.nodes, row.client_on, row.request.replicas, row.request.size) == (3, client_on, 3, size)
        assert f"client on {client_on}" in row.title and not row.across_nodes
    assert (rows["js-pub-async"].request.window, rows["js-pub-sync"].request.window) == (256, 0)
    assert [rows[f"js-fetch-{ack}"].request.ack for ack in ("explicit", "all")] == ["explicit", "all"]
    assert {rows[f"js-fetch-{ack}"].request.batch for ack in ("explicit", "all")} == {500}


def test_sixteen_r3_rows_and_none_declared_not_yet() -> None:
    assert len([s for s in SCENARIOS if s.key.startswith("r3-")]) == 16
    assert not compare.NOT_YET


def test_the_durable_nats_server_runs_fewer_r3_async_messages_and_appliance_matches_them() -> None:
    row = BY_KEY["r3-js-pub-async-leader"]
    assert row.request_for(NATS_SYNC_ALWAYS, 0.05).msgs == 1_000
    assert row.request_for(NATS_DEFAULT, 0.05).msgs == row.request_for(APPLIANCE, 0.05).msgs == 5_000
    assert compare.matched_counts(row, (NATS_DEFAULT, NATS_SYNC_ALWAYS, APPLIANCE), 0.05) == (1_000,)


def test_only_takes_keys_and_patterns_and_the_failover_key() -> None:
    scenarios, failover = compare.select("r3-*")
    assert len(scenarios) == 16 and failover
    scenarios, failover = compare.select("r3-js-pub-sync-leader")
    assert [s.key for s in scenarios] == ["r3-js-pub-sync-leader"] and not failover
    scenarios, failover = compare.select(FAILOVER_KEY)
    assert scenarios == () and failover
    scenarios, failover = compare.select("")
    assert scenarios == SCENARIOS and failover
    assert [s.key for s in compare.select("pubsub-total")[0]] == ["pubsub", "pubsub-total"]


def test_an_unknown_key_is_refused_with_the_known_ones() -> None:
    with pytest.raises(click.BadParameter, match=r"unknown scenarios \['r4-\*'\]"):
        compare.select("r4-*")


def test_an_appliance_failover_that_failed_or_lost_a_message_fails_make_bench() -> None:
    assert compare.failed_failovers({}) == []
    assert compare.failed_failovers({APPLIANCE.name: FailoverResult(seconds=[1.0], checked=True)}) == []
    assert compare.failed_failovers({APPLIANCE.name: FailoverResult(failure="failed: x")}) == ["failed: x"]
    assert compare.failed_failovers({APPLIANCE.name: FailoverResult(lost=2, duplicated=1)}) == [
        "2 acknowledged messages lost, 1 duplicated"]
    assert compare.failed_failovers({NATS_DEFAULT.name: FailoverResult(failure="failed: x")}) == []


def test_quick_means_one_round_a_twentieth_and_three_kills(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    seen: dict[str, object] = {}

    def run_all(scenarios: object, targets: object, *, rounds: int, scale: float, **_: object) -> dict[str, object]:
        seen.update(rounds=rounds, scale=scale)
        return {}

    def run_failovers(_pool: object, targets: object, kills: int, _log: object) -> dict[str, FailoverResult]:
        seen["kills"] = kills
        return {}

    monkeypatch.setattr(compare, "run_all", run_all)
    monkeypatch.setattr(compare, "run_failovers", run_failovers)
    result = CliRunner().invoke(compare.main, ["--quick", "--only", FAILOVER_KEY, "--kills", "5",
                                               "--targets", "nats-server", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert seen == {"rounds": 1, "scale": 0.05, "kills": 5}
