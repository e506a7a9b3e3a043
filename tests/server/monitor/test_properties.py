"""Properties over generated inputs: text forms parse back, pages are slices, garbage is refused."""

from __future__ import annotations

import datetime
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance import limits
from appliance.clock import ManualClock
from appliance.durations import go_duration, rfc3339_nano, uptime
from appliance.server.monitor.http import HttpError, parse_head
from appliance.testing.fake_view import FakeServerView, MonitorProbe

UNIT_NS = {"h": 3_600 * 10**9, "m": 60 * 10**9, "s": 10**9, "ms": 10**6, "µs": 10**3, "ns": 1}
GO_DURATION = re.compile(r"(-?)((?:\d+(?:\.\d+)?(?:h|ms|m|s|µs|ns))+)")
PART = re.compile(r"(\d+)(?:\.(\d+))?(h|ms|m|s|µs|ns)")
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def parse_go_duration(text: str) -> int:
    """An independent reading of Go's duration syntax (what time.ParseDuration accepts), exact in ns."""
    match = GO_DURATION.fullmatch(text)
    assert match, text
    total = 0
    for whole, fraction, unit in PART.findall(match.group(2)):
        total += int(whole) * UNIT_NS[unit]
        if fraction:
            total += int(fraction) * UNIT_NS[unit] // 10 ** len(fraction)
    return -total if match.group(1) else total


@given(INT64)
def test_go_duration_reads_back_exactly(ns: int) -> None:
    assert parse_go_duration(go_duration(ns)) == ns


@given(INT64)
def test_go_duration_has_no_trailing_zero_fraction(ns: int) -> None:
    assert not re.search(r"\.\d*0[a-zµ]", go_duration(ns))


@given(st.integers(min_value=0, max_value=200 * 365 * 86_400 * 10**9))
def test_uptime_reads_back_to_whole_seconds(ns: int) -> None:
    text = uptime(ns)
    units = {"y": 365 * 86_400, "d": 86_400, "h": 3_600, "m": 60, "s": 1}
    parts = re.fullmatch(r"(?:(\d+)y)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(\d+)s", text)
    assert parts, text
    seconds = sum(int(v) * units[u] for v, u in zip(parts.groups(), "ydhms", strict=True) if v)
    assert seconds == ns // 10**9


@given(st.integers(min_value=0, max_value=253_402_300_799 * 10**9 + 999_999_999))
def test_rfc3339_nano_reads_back(ns: int) -> None:
    text = rfc3339_nano(ns)
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z", text)
    assert match, text
    moment = datetime.datetime.fromisoformat(match.group(1)).replace(tzinfo=datetime.UTC)
    fraction = int((match.group(2) or "0").ljust(9, "0"))
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    assert (moment - epoch) // datetime.timedelta(seconds=1) * 10**9 + fraction == ns


connection_rows = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 10**6), st.integers(0, 10**6)), min_size=0, max_size=30
)


@settings(max_examples=60, deadline=None)
@given(
    rows=connection_rows,
    sort=st.sampled_from(["", "cid", "msgs_to", "bytes_from", "pending", "subs"]),
    offset=st.integers(-5, 40),
    limit=st.integers(-5, 40),
)
def test_connz_pages_are_slices_of_one_order(
    rows: list[tuple[int, int, int]], sort: str, offset: int, limit: int
) -> None:
    view = FakeServerView(clock=ManualClock())
    for cid, (pending, out_msgs, in_bytes) in enumerate(rows, start=1):
        view.connect(cid, pending_bytes=pending, out_msgs=out_msgs, in_bytes=in_bytes)
    probe = MonitorProbe(view)
    everything = probe.get("/connz", f"sort={sort}&limit={len(rows) + 1}").json["connections"]
    page = probe.get("/connz", f"sort={sort}&offset={offset}&limit={limit}").json
    start, size = max(offset, 0), limit if limit > 0 else 1024
    assert page["connections"] == everything[start : start + size]
    assert page["num_connections"] == len(page["connections"])
    assert page["total"] == len(rows)
    assert sorted(c["cid"] for c in everything) == list(range(1, len(rows) + 1))


@given(st.binary(max_size=300))
def test_garbage_heads_are_refused_with_an_http_error_only(noise: bytes) -> None:
    try:
        request = parse_head(noise + b"\r\n\r\n")
    except HttpError as problem:
        assert 400 <= problem.response.status < 600
    else:
        assert request.method.isalpha() and request.method.isupper()
        assert request.path != ""
        assert request.body_bytes <= limits.HTTP_BODY_BYTES_MAX
