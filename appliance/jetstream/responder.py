"""Which JetStream server of a cluster answers an API request (spec §6.3).

Every JetStream server of a cluster subscribes the API, so every one receives each request; all
but one stay silent. Standalone, this server answers everything.

| request                                              | answered by                             |
|------------------------------------------------------|-----------------------------------------|
| any, while the meta group has no leader              | every server: 503/10008                 |
| INFO, STREAM.NAMES/LIST, a new STREAM.CREATE,        | the meta leader                         |
| STREAM.PEER.REMOVE                                   |                                         |
| a request naming a stream the meta state lacks       | the meta leader (its 404)               |
| STREAM.* of a stream (LEADER.STEPDOWN included),     | the stream's leader (it holds the stream|
| CONSUMER.CREATE/NAMES/LIST                           | and every consumer of it)               |
| CONSUMER.INFO/DELETE/LEADER.STEPDOWN/... of a        | the consumer's leader; the stream's     |
| consumer                                             | leader when the meta state lacks it     |
| STREAM.INFO / STREAM.LEADER.STEPDOWN / CONSUMER.* of | a replica that becomes its ready leader |
| a leaderless group, or of a new leader that has not  | within LEADERLESS_DELAY_S (looked at    |
| applied its predecessors' entries yet                | every LEADER_POLL_S), else its replicas |
| (RaftGroup.ready_to_lead)                            | after that delay: the stream's info as  |
|                                                      | it holds it; 10008 for the others       |

META.LEADER.STEPDOWN is not here: it lives in the system account (stepdown.py MetaStepDown).

The stream's leader handles what needs the stream's own state; what changes the meta state it
proposes through the meta leader (cluster/forward.py). A new stream's create reply comes from the
stream's first leader once it is subscribed (service.py), so a publish right after it is stored.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.cluster.group import RaftGroup
    from appliance.jetstream.service import AccountJetStream


LEADERLESS_DELAY_S = 0.5  # nats-server's replicas wait this long before answering for a leaderless group
LEADER_POLL_S = 0.02  # meanwhile a server without a (ready) leader looks again this often (api.dispatch)


class Answer(enum.Enum):
    HERE = "here"
    SILENT = "silent"
    UNAVAILABLE = "unavailable"  # no meta leader: 503/10008
    LEADERLESS = "leaderless"  # this replica answers a moment later if its group still has no leader
    NOT_READY = "not ready"  # this new leader answers once it has applied its predecessors' entries


META_VERBS = frozenset({"NAMES", "LIST", "LEADER", "PEER", "CANCEL_MOVE", "RESTORE"})


def responder(ajs: AccountJetStream, tokens: list[str]) -> Answer:
    meta = ajs.service.meta
    if not meta.clustered:
        return Answer.HERE
    if not meta.leader():
        # a stream's or consumer's own requests go on where its group has a leader (an R1 asset on
        # a surviving server is unaffected, spec §9.8); what needs the meta group is unavailable
        if _asset_scoped(tokens):
            answer = _by_asset(ajs, tokens, leads_meta=False)
            if answer is not Answer.SILENT:
                return answer
        return Answer.UNAVAILABLE
    return _by_asset(ajs, tokens, leads_meta=meta.is_leader())


def _asset_scoped(tokens: list[str]) -> bool:
    """Requests about one stream's or consumer's state that its own group answers."""
    if tokens[0] == "STREAM" and len(tokens) >= 3:
        return tokens[1] in ("INFO", "PURGE", "MSG", "SNAPSHOT")
    if tokens[0] != "CONSUMER" or len(tokens) < 3:
        return False
    return tokens[1] in ("NAMES", "LIST") or (len(tokens) >= 4 and tokens[1] in ("INFO", "PAUSE", "UNPIN", "RESET"))


def _by_asset(ajs: AccountJetStream, tokens: list[str], *, leads_meta: bool) -> Answer:
    head = tokens[0]
    if head == "STREAM" and tokens[1:3] == ["LEADER", "STEPDOWN"] and len(tokens) == 4:
        return _by_stream(ajs, tokens[3], leads_meta, replicas_answer=True)
    if head == "STREAM" and len(tokens) >= 3 and tokens[1] not in META_VERBS:
        name = tokens[3] if tokens[1] == "MSG" and len(tokens) >= 4 else tokens[2]
        return _by_stream(ajs, name, leads_meta, replicas_answer=tokens[1] == "INFO")
    if head == "CONSUMER" and len(tokens) >= 3:
        verb = tokens[1]
        if verb == "DURABLE" and len(tokens) >= 4:
            return _by_stream(ajs, tokens[3], leads_meta)
        if verb in ("CREATE", "NAMES", "LIST") or len(tokens) < 4:
            return _by_stream(ajs, tokens[2], leads_meta)
        if verb == "LEADER":  # CONSUMER.LEADER.STEPDOWN.<stream>.<consumer>
            if tokens[2] != "STEPDOWN" or len(tokens) != 5:
                return Answer.HERE if leads_meta else Answer.SILENT
            return _by_consumer(ajs, tokens[3], tokens[4], leads_meta)
        return _by_consumer(ajs, tokens[2], tokens[3], leads_meta)
    return Answer.HERE if leads_meta else Answer.SILENT


def _by_stream(ajs: AccountJetStream, name: str, leads_meta: bool, *,
               replicas_answer: bool = False) -> Answer:
    """`replicas_answer`: a leaderless stream's replicas answer (its info, or 10008)."""
    if not _known(ajs, name):
        return Answer.HERE if leads_meta else Answer.SILENT
    stream = ajs.streams.get(name)
    if stream is None:
        return Answer.SILENT
    if stream.group.is_leader():
        return _as_leader(stream.group)
    return Answer.LEADERLESS if replicas_answer and _leaderless(ajs, stream.group) else Answer.SILENT


def _by_consumer(ajs: AccountJetStream, stream_name: str, name: str, leads_meta: bool) -> Answer:
    meta = ajs.service.meta
    if not _known(ajs, stream_name):
        return Answer.HERE if leads_meta else Answer.SILENT
    stream = ajs.streams.get(stream_name)
    if stream is None:
        return Answer.SILENT
    consumer = stream.consumers.get(name)
    if consumer is None or meta.state.group_of(ajs.account.name, stream_name, name) is None:
        return Answer.HERE if stream.group.is_leader() else Answer.SILENT
    if consumer.group.is_leader():
        return _as_leader(consumer.group)
    return Answer.LEADERLESS if _leaderless(ajs, consumer.group) else Answer.SILENT


def _leaderless(ajs: AccountJetStream, group: RaftGroup) -> bool:
    """This replica knows no leader of its group and is one of its voters. A joiner whose log
    has no voters yet (regroup.py: it waits for the leader to add it, one peer at a time, while
    the leader serves another joiner's catch-up) knows no leader only because nobody has
    contacted it: its answer would call the stream leaderless, with no replicas, over the
    leader's own (a loaded leader answers later than LEADERLESS_DELAY_S)."""
    return not group.leader() and ajs.service.peer in group.voters()


def _as_leader(group: RaftGroup) -> Answer:
    """A new leader answers once it has applied its predecessors' entries (ready_to_lead): before,
    its state is behind what the old leader answered (a consumer's acks, a stream's last messages).
    A leadership transfer makes that window short; the request waits it out (api.py)."""
    return Answer.HERE if group.ready_to_lead() else Answer.NOT_READY


def _known(ajs: AccountJetStream, name: str) -> bool:
    return name in ajs.service.meta.state.accounts.get(ajs.account.name, {})
