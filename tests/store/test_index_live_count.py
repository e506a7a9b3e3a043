"""StreamIndex.live_count_from (batch Direct Get's Nats-Num-Pending) equals counting live_seqs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from appliance.store.api import StoreLimits
from appliance.store.index import StreamIndex


@given(n=st.integers(0, 60), removed=st.sets(st.integers(1, 60)), start=st.integers(0, 70))
def test_live_count_from_matches_a_walk(n: int, removed: set[int], start: int) -> None:
    index = StreamIndex(StoreLimits())
    for seq in range(1, n + 1):
        index.add(seq, f"s.{seq % 3}", 10, seq)
    for seq in sorted(removed):
        index.remove(seq)
    assert index.live_count_from(start) == len(list(index.live_seqs(max(start, 1))))
