"""/raftz: nats-server 2.15.1's answer for the RAFT groups held here (pure renderer, fake view)."""

import json
from pathlib import Path

from appliance.server.monitor.view import RaftzGroup, RaftzPeer, RaftzWal
from appliance.testing.fake_view import FakeServerView, MonitorProbe
from appliance.testing.json_shape import shape

CAPTURE = Path("/work/shared/spec/captures/n1_raftz.json")
START_WALL_S = 1_795_305_221.0


def meta(**overrides: object) -> RaftzGroup:
    values: dict[str, object] = dict(
        account="$SYS", name="_meta_", kind="meta", id="oP5LzZ64", state="LEADER", size=3, quorum_needed=2,
        committed=7, applied=7, term=1, pterm=1, pindex=7, leader="oP5LzZ64",
        leader_since_wall_s=START_WALL_S, ever_had_leader=True, voted_for="oP5LzZ64",
        wal=RaftzWal(messages=4, bytes=3703, first_seq=4, last_seq=7, last_wall_s=START_WALL_S + 1),
        peers=(RaftzPeer("hxTjz3J4", "n3-c1", last_replicated_index=7, last_seen_s=0.2336),
               RaftzPeer("YGhnH3VX", "n2-c1", last_replicated_index=7, last_seen_s=0.238945446)),
    )
    values.update(overrides)
    return RaftzGroup(**values)  # type: ignore[arg-type]


def follower_stream() -> RaftzGroup:
    """A follower knows only its leader's contact; the other follower neither index nor contact."""
    return meta(account="$G", name="S-R3F-lbqxhyhC", kind="stream", state="FOLLOWER", leader="hxTjz3J4",
                leader_since_wall_s=None, voted_for="hxTjz3J4",
                peers=(RaftzPeer("YGhnH3VX", "n2-c1"), RaftzPeer("hxTjz3J4", "n3-c1", last_seen_s=0.028316296)))


def test_without_raft_groups_the_standalone_404(monitor: MonitorProbe) -> None:
    page = monitor.get("/raftz")
    assert (page.status, page.text) == (404, "No Raft nodes registered")


def test_the_system_accounts_groups_by_default_with_three_space_indent(view: FakeServerView,
                                                                        monitor: MonitorProbe) -> None:
    view.raftz = [meta(), follower_stream()]
    page = monitor.get("/raftz")
    assert page.status == 200 and page.header("Content-Type") == "application/json"
    assert page.text.startswith('{\n   "$SYS": {\n      "_meta_": {\n         "id": "oP5LzZ64",')
    body = page.json
    assert list(body) == ["$SYS"]
    group = body["$SYS"]["_meta_"]
    assert list(group["peers"]) == ["YGhnH3VX", "hxTjz3J4"]  # Go marshals map keys sorted
    assert group["peers"]["YGhnH3VX"] == {"name": "n2-c1", "known": True, "last_replicated_index": 7,
                                          "last_seen": "238.945446ms"}
    assert group["leader_since"] == "2026-11-21T23:53:41Z"
    assert group["wal"] == {"messages": 4, "bytes": 3703, "first_seq": 4, "first_ts": "0001-01-01T00:00:00Z",
                            "last_seq": 7, "last_ts": "2026-11-21T23:53:42Z", "consumer_count": 0}


def test_the_shape_is_nats_servers(view: FakeServerView, monitor: MonitorProbe) -> None:
    """Every key of the captured nats-server 2.15.1 /raftz, in its order, with the same JSON types."""
    view.raftz = [meta()]
    ours = monitor.get("/raftz").json
    theirs = json.loads(CAPTURE.read_text())
    ours_group, theirs_group = ours["$SYS"]["_meta_"], theirs["SYS"]["_meta_"]
    assert list(ours_group) == list(theirs_group)
    assert shape(ours_group, frozenset({"peers"})) == shape(theirs_group, frozenset({"peers"}))
    assert {json.dumps(shape(p)) for p in ours_group["peers"].values()} == {
        json.dumps(shape(p)) for p in theirs_group["peers"].values()}


def test_follower_omits_what_it_does_not_track(view: FakeServerView, monitor: MonitorProbe) -> None:
    view.raftz = [meta(), follower_stream()]
    group = monitor.get("/raftz", "acc=$G").json["$G"]["S-R3F-lbqxhyhC"]
    assert "leader_since" not in group and group["state"] == "FOLLOWER" and group["leader"] == "hxTjz3J4"
    assert group["peers"] == {"YGhnH3VX": {"name": "n2-c1", "known": True},
                              "hxTjz3J4": {"name": "n3-c1", "known": True, "last_seen": "28.316296ms"}}


def test_a_leaderless_candidate(view: FakeServerView, monitor: MonitorProbe) -> None:
    view.raftz = [meta(state="CANDIDATE", leader="", leader_since_wall_s=None, term=3,
                       peers=(RaftzPeer("YGhnH3VX", "n2-c1"), RaftzPeer("hxTjz3J4", "n3-c1")))]
    group = monitor.get("/raftz").json["$SYS"]["_meta_"]
    assert group["state"] == "CANDIDATE" and "leader" not in group and "leader_since" not in group
    assert group["ever_had_leader"] is True and group["term"] == 3


def test_filters(view: FakeServerView, monitor: MonitorProbe) -> None:
    view.raftz = [meta(), follower_stream()]
    assert list(monitor.get("/raftz", "group=_meta_").json["$SYS"]) == ["_meta_"]
    assert list(monitor.get("/raftz", "acc=$G").json["$G"]) == ["S-R3F-lbqxhyhC"]
    for query in ("acc=$G&group=nope", "acc=nope", "group=S-R3F-lbqxhyhC"):  # the group is $G's, not $SYS's
        page = monitor.get("/raftz", query)
        assert (page.status, page.text) == (200, "{}"), query
    view.system_account = ""
    page = monitor.get("/raftz")
    assert (page.status, page.text) == (404, "No Raft nodes returned, check supplied filters")
    assert monitor.get("/raftz", "acc=$G").status == 200


def test_asked_over_the_system_account(view: FakeServerView) -> None:
    from appliance.server.monitor import MonitorApp

    def ask(body: bytes) -> object:
        reply = MonitorApp(view).system_reply("RAFTZ", body, seq=1)
        assert reply is not None
        return json.loads(reply)

    assert ask(b"")["data"] == {}  # no groups: nats-server's Raftz answers {} (the 404 is HTTP's)
    view.raftz = [meta(), follower_stream()]
    assert list(ask(b"")["data"]["$SYS"]) == ["_meta_"]
    assert list(ask(b'{"account":"$G"}')["data"]["$G"]) == ["S-R3F-lbqxhyhC"]
    assert ask(b'{"account":"$G","group":"nope"}')["data"] == {}
    assert ask(b'{"group":7}')["error"]["code"] == 400
    view.system_account = ""
    assert ask(b"")["data"] is None
