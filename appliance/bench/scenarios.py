"""The scenarios of `make bench` (appliance/bench/compare.py): what each row runs, on how many nodes.

Message counts are those of a full run (`--scale` multiplies them). nats-server with
`sync_interval: always` fsyncs every message, so its async publish and prefill rows run
ALWAYS_MSGS (appliance also runs that count: ratios divide runs of the same length).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from appliance.bench.plan import BenchRequest
from appliance.bench.replicas import ClientOn
from appliance.bench.servers import ServerKind

# `--only` takes this key for the failover measurement (kill -9 of an R3 stream's leader), which is
# not a rate row: appliance/bench/failover.py
FAILOVER_KEY = "r3-failover"
CLIENT_ON: tuple[ClientOn, ...] = ("leader", "follower")


def scaled(request: BenchRequest, scale: float) -> BenchRequest:
    return replace(request, msgs=max(10, int(request.msgs * scale)),
                   keys=min(request.keys, max(10, int(1000 * scale))))


@dataclass(frozen=True, slots=True)
class Scenario:
    key: str
    title: str
    request: BenchRequest
    headline: str  # the report row compared across servers
    reference_msgs_per_s: float | None = None  # nats-server 2.15.1 with a C client on this machine
    nodes: int = 1  # 3: every server kind runs as a three-node cluster
    across_nodes: bool = False  # subscribers/responders on node 2, publishers/requesters on node 1
    derived_from: str = ""  # not run itself: another row (`headline`) of that scenario's runs
    c_reference: bool = False  # every round also runs the C reference client against nats-server
    # R3 rows: the client connects to the stream leader's node, or to a follower's (the stream is
    # created, and its leader looked up, before each run)
    client_on: ClientOn | None = None
    # messages against nats-server sync=always (before --scale), when fewer than `request.msgs`: it
    # fsyncs every message, so its async publish (and the prefill of a fetch/push run) takes ~40 s
    # per 100 k messages; a rate needs far fewer
    always_msgs: int | None = None

    def request_for(self, kind: ServerKind, scale: float) -> BenchRequest:
        """The scaled request run against one kind of server."""
        request = scaled(self.request, scale)
        if kind.sync_always and self.always_msgs is not None:
            request = replace(request, msgs=min(request.msgs, max(10, int(self.always_msgs * scale))))
        return request


ALWAYS_MSGS = 20_000  # nats-server sync=always fsyncs every message (~2.5 k/s): its async/prefill counts


def _js_rows() -> tuple[Scenario, ...]:
    """The issue's JetStream rows, at 128 B and 1 KiB: async publish (window 256), sync publish
    (p50/p99 in the latency table), fetch with ack explicit and ack all."""
    rows: list[Scenario] = []
    for size, tag, label in ((128, "", "128 B"), (1024, "-1k", "1 KiB")):
        rows += [
            Scenario(f"js-pub-async{tag}", f"JS R1 async pub {label}, window 256",
                     BenchRequest("js-pub", msgs=200_000, window=256, size=size), "js-pub total",
                     140_000 if size == 128 else None, always_msgs=ALWAYS_MSGS),
            # one fsync per message on every durable server: the 1 KiB row takes half as many
            Scenario(f"js-pub-sync{tag}", f"JS R1 sync pub {label}",
                     BenchRequest("js-pub", msgs=20_000 if size == 128 else 10_000, window=0, size=size),
                     "js-pub total", 10_600 if size == 128 else None),
            Scenario(f"js-fetch-explicit{tag}", f"JS R1 fetch {label} batch 500, ack explicit",
                     BenchRequest("js-fetch", msgs=200_000, batch=500, ack="explicit", size=size),
                     "js-fetch total", 90_000 if size == 128 else None, always_msgs=ALWAYS_MSGS),
            Scenario(f"js-fetch-all{tag}", f"JS R1 fetch {label} batch 500, ack all",
                     BenchRequest("js-fetch", msgs=200_000, batch=500, ack="all", size=size), "js-fetch total",
                     142_000 if size == 128 else None, always_msgs=ALWAYS_MSGS),
        ]
    return tuple(rows)


def _r3_rows() -> tuple[Scenario, ...]:
    """The issue's R3 rows on a three-node cluster, client on the stream leader's node and on a
    follower's: async publish (window 256), sync publish (p50/p99 in the latency table), fetch with
    ack explicit and ack all, at 128 B and 1 KiB."""
    rows: list[Scenario] = []
    for size, tag, label in ((128, "", "128 B"), (1024, "-1k", "1 KiB")):
        for client_on in CLIENT_ON:
            on = f"client on {client_on}"
            rows += [
                Scenario(f"r3-js-pub-async{tag}-{client_on}",
                         f"3 nodes: JS R3 async pub {label}, window 256, {on}",
                         BenchRequest("js-pub", msgs=100_000, window=256, size=size, replicas=3),
                         "js-pub total", nodes=3, client_on=client_on, always_msgs=ALWAYS_MSGS),
                Scenario(f"r3-js-pub-sync{tag}-{client_on}", f"3 nodes: JS R3 sync pub {label}, {on}",
                         BenchRequest("js-pub", msgs=5_000, window=0, size=size, replicas=3), "js-pub total",
                         nodes=3, client_on=client_on),
                Scenario(f"r3-js-fetch-explicit{tag}-{client_on}",
                         f"3 nodes: JS R3 fetch {label} batch 500, ack explicit, {on}",
                         BenchRequest("js-fetch", msgs=100_000, batch=500, ack="explicit", size=size,
                                      replicas=3),
                         "js-fetch total", nodes=3, client_on=client_on, always_msgs=ALWAYS_MSGS),
                Scenario(f"r3-js-fetch-all{tag}-{client_on}",
                         f"3 nodes: JS R3 fetch {label} batch 500, ack all, {on}",
                         BenchRequest("js-fetch", msgs=100_000, batch=500, ack="all", size=size, replicas=3),
                         "js-fetch total", nodes=3, client_on=client_on, always_msgs=ALWAYS_MSGS),
            ]
    return tuple(rows)


# Core NATS across a route (issue 13): two-node clusters of each kind, publisher (requester) on n1,
# subscriber (responder) on n2. benchmarks/cluster.py runs these rows with a 1-worker appliance too.
CLUSTER_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("cluster-pubsub", "2-node cluster: pub n1 → sub n2 128 B (sub rate)",
             BenchRequest("pubsub", msgs=400_000), "sub total", nodes=2, across_nodes=True),
    Scenario("cluster-pubsub-1k", "2-node cluster: pub n1 → sub n2 1 KiB (sub rate)",
             BenchRequest("pubsub", msgs=200_000, size=1024), "sub total", nodes=2, across_nodes=True),
    Scenario("cluster-request", "2-node cluster: request n1 → reply n2 128 B",
             BenchRequest("request", msgs=10_000), "request total", nodes=2, across_nodes=True),
)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("pub", "core pub 128 B", BenchRequest("pub", msgs=2_000_000), "pub total", 2_500_000),
    Scenario("pubsub", "core pub+sub 128 B (sub rate)", BenchRequest("pubsub", msgs=1_000_000), "sub total",
             990_000, c_reference=True),
    # nats bench's "Pub/Sub stats" line: published plus received messages over the whole run
    Scenario("pubsub-total", "core pub+sub 128 B (pub+sub total, as nats bench's Pub/Sub stats)",
             BenchRequest("pubsub", msgs=1_000_000), "pub+sub total", 990_000, derived_from="pubsub"),
    Scenario("request", "core request/reply 128 B", BenchRequest("request", msgs=20_000), "request total"),
    *_js_rows(),
    # push is timed from the first message to the last: a run needs enough messages to last
    Scenario("js-push", "JS R1 push, ack none", BenchRequest("js-push", msgs=200_000, ack="none"), "js-push total",
             always_msgs=5 * ALWAYS_MSGS),
    Scenario("kv-put", "KV put 128 B (sync)", BenchRequest("kv-put", msgs=10_000), "kv-put total"),
    Scenario("kv-get", "KV get 128 B (direct get)", BenchRequest("kv-get", msgs=20_000), "kv-get total"),
    *_r3_rows(),
    *CLUSTER_SCENARIOS,
)


# Scenarios the server does not support yet, by key, with why: appliance is not run on them and the
# table says "cannot run yet: <why>". Empty: every row is measured, and a server that cannot do a
# row yet (appliance R3 before JetStream clustering) shows "failed: <its error>" there.
NOT_YET: dict[str, str] = {}
