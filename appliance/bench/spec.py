"""What one bench client is asked to do (ClientSpec) and what it reports back (ClientResult).

Both cross a process boundary (pickled), so they hold plain values and numpy arrays only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from appliance.bench.stats import Rate, Samples
from appliance.limits import BENCH_IDLE_TIMEOUT_S

Role = Literal["pub", "sub", "request", "reply", "js-pub", "js-fetch", "js-push", "kv-put", "kv-get"]
Ack = Literal["none", "all", "explicit"]


@dataclass(frozen=True, slots=True)
class ClientSpec:
    url: str
    role: Role
    index: int
    msgs: int  # operations this client performs (or messages it expects to receive)
    size: int
    subject: str
    stream: str = ""
    consumer: str = ""
    window: int = 0  # js-pub: outstanding acks; 0 = synchronous
    batch: int = 1  # js-fetch: messages per pull request
    ack: Ack = "none"
    bucket: str = ""
    keys: int = 1
    timeout_s: float = BENCH_IDLE_TIMEOUT_S  # no progress for this long: the client gives up
    # receivers and senders on different nodes: the subject of the interest probe (plan._across_nodes)
    probe: str = ""
    probe_answers: int = 0  # a sender: receivers that must answer its probe before it is ready


@dataclass(slots=True)
class ClientResult:
    role: Role
    index: int
    msgs: int = 0
    bytes: int = 0
    elapsed_s: float = 0.0
    cpu_s: float = 0.0
    ended_s: float | None = None  # CLOCK_MONOTONIC seconds when the measured interval ended
    errors: int = 0
    first_error: str = ""
    latency_samples: Samples = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    latency_count: int = 0
    latency_max_ns: int = 0
    client_id: int = 0  # the server's INFO client_id for this connection (tells an appliance worker)

    @property
    def rate(self) -> Rate:
        return Rate(self.msgs, self.bytes, self.elapsed_s, self.ended_s)
