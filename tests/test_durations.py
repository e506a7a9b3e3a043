"""Go's duration and time texts, checked against outputs of Go itself (time package tests, live servers)."""

import pytest

from appliance.durations import GO_ZERO_TIME, go_duration, rfc3339_nano, uptime, wall_ns

NS = 1
US = 1_000
MS = 1_000_000
S = 1_000_000_000
MINUTE = 60 * S
HOUR = 60 * MINUTE


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (999, "999ns"),
        (1_100, "1.1µs"),
        (717 * US, "717µs"),
        (177 * US, "177µs"),
        (2_200 * US, "2.2ms"),
        (747_765_476 * NS, "747.765476ms"),
        (3_300 * MS, "3.3s"),
        (4 * MINUTE + 5 * S, "4m5s"),
        (4 * MINUTE + 5_001 * MS, "4m5.001s"),
        (5 * HOUR + 6 * MINUTE + 7_001 * MS, "5h6m7.001s"),
        (8 * MINUTE + 1, "8m0.000000001s"),
        (HOUR + 2 * MINUTE + 3_500 * MS, "1h2m3.5s"),
        (2 * MINUTE + 33 * S, "2m33s"),
        (3 * MINUTE, "3m0s"),
        (HOUR, "1h0m0s"),
        (-1_500 * MS, "-1.5s"),
        (-1, "-1ns"),
        ((1 << 63) - 1, "2562047h47m16.854775807s"),
        (-(1 << 63), "-2562047h47m16.854775808s"),
    ],
)
def test_go_duration_prints_what_go_prints(ns: int, text: str) -> None:
    assert go_duration(ns) == text


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (999 * MS, "0s"),
        (1 * S, "1s"),
        (3 * MINUTE + 47 * S, "3m47s"),
        (2 * MINUTE + 33 * S + 900 * MS, "2m33s"),
        (HOUR, "1h0m0s"),
        (25 * HOUR + 5 * S, "1d1h0m5s"),
        (366 * 24 * HOUR + 61 * S, "1y1d0h1m1s"),
        (-5 * S, "-5s"),
        (24_637_499_999_999_999, "285d3h44m59s"),  # truncates in integers: float division would round up
    ],
)
def test_uptime_is_nats_server_my_uptime(ns: int, text: str) -> None:
    assert uptime(ns) == text


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "1970-01-01T00:00:00Z"),
        (1_795_305_221_858_006_007, "2026-11-21T23:53:41.858006007Z"),
        (1_795_305_221_870_744_990, "2026-11-21T23:53:41.87074499Z"),
        (1_795_305_221_500_000_000, "2026-11-21T23:53:41.5Z"),
        (1_795_305_221_000_000_001, "2026-11-21T23:53:41.000000001Z"),
    ],
)
def test_rfc3339_nano_drops_trailing_zeros_of_the_fraction(ns: int, text: str) -> None:
    assert rfc3339_nano(ns) == text


def test_wall_ns_keeps_microseconds_and_drops_float_noise() -> None:
    assert wall_ns(1_700_000_000.123456) == 1_700_000_000_123_456_000
    assert wall_ns(0.000717) == 717 * US
    assert rfc3339_nano(wall_ns(1_700_000_003.25)) == "2023-11-14T22:13:23.25Z"


def test_go_zero_time_is_the_year_one() -> None:
    assert GO_ZERO_TIME == "0001-01-01T00:00:00Z"
