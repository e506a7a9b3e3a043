"""The `nats` CLI's value formats and layouts, as pure functions."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.cli.format import (
    Columns,
    comma,
    go_duration,
    humanize_duration,
    ibytes,
    local_time,
    parse_go_time,
    render_table,
    rfc3339_local,
    seen_ago,
    since_ns,
)

S = 1_000_000_000
CET = timezone(timedelta(hours=1))


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (120 * S, "2m0s"),
        (86400 * S, "1d0h0m0s"),
        (3600 * S, "1h0m0s"),
        (90 * S, "1m30s"),
        (30 * S, "30.00s"),
        (1_500_000_000, "1.50s"),
        (150_000_000, "150ms"),
        (1_234_567, "1ms"),
        (1_500, "2µs"),
        (400 * 86400 * S, "1y35d0h0m0s"),
        (2**63 - 1, "never"),
    ],
)
def test_durations_read_as_natscli_prints_them(ns: int, text: str) -> None:
    assert humanize_duration(ns) == text


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (999, "999ns"),
        (1_500, "1.5µs"),
        (1_234_567, "1.234567ms"),
        (2 * S, "2s"),
        (90 * S, "1m30s"),
        (3600 * S + 1, "1h0m0.000000001s"),
        (-2 * S, "-2s"),
    ],
)
def test_go_duration_string(ns: int, text: str) -> None:
    assert go_duration(ns) == text


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (9, "9 B"),
        (308, "308 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (10 * 1024, "10 KiB"),
        (1024 * 1024, "1.0 MiB"),
        (5 * 1024**3, "5.0 GiB"),
    ],
)
def test_sizes_are_iec_like_go_humanize(size: int, text: str) -> None:
    assert ibytes(size) == text


def test_counts_have_thousands_separators() -> None:
    assert (comma(0), comma(1000), comma(1234567), comma(-42)) == ("0", "1,000", "1,234,567", "-42")


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (70_000_000, "seen 0.07s ago"),
        (420_000_000, "seen 0.42s ago"),
        (12 * S, "seen 12.00s ago"),
        (90 * S, "seen 1m30s ago"),
        (0, "not seen"),
        (2**63 - 1, "not seen"),
    ],
)
def test_replica_seen_reads_as_in_the_seeds(ns: int, text: str) -> None:
    assert seen_ago(ns) == text


def test_api_times_parse_with_nanoseconds_and_zero_time_is_none() -> None:
    moment = parse_go_time("2026-11-21T23:47:57.030742469Z")
    assert moment == datetime(2026, 11, 21, 23, 47, 57, 30742, tzinfo=UTC)
    assert parse_go_time("0001-01-01T00:00:00Z") is None
    assert parse_go_time("2021-02-05T12:07:34+01:00") == datetime(2021, 2, 5, 11, 7, 34, tzinfo=UTC)
    with pytest.raises(ValueError):
        parse_go_time("yesterday")


def test_headings_use_rfc3339_in_the_local_zone_as_the_seeds() -> None:
    moment = datetime(2021, 2, 5, 11, 7, 34, 123, tzinfo=UTC)
    assert rfc3339_local(moment, CET) == "2021-02-05T12:07:34+01:00"
    assert rfc3339_local(moment, UTC) == "2021-02-05T11:07:34Z"
    assert local_time(moment, CET) == "2021-02-05 12:07:34"


def test_since_is_never_negative() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert since_ns(now - timedelta(seconds=2), now) == 2 * S
    assert since_ns(now + timedelta(seconds=2), now) == 0
    assert since_ns(None, now) == 0


def test_columns_right_align_every_label_to_the_longest_plus_two() -> None:
    cols = Columns("Information for Stream ORDERS created 2021-02-05T12:07:34+01:00")
    cols.title("Configuration")
    cols.row("Replicas", 3)
    cols.title("Cluster Information")
    cols.row("Name", "C1")
    cols.row("Leader", "n1-c1")
    cols.row("Replica", "n4-c1, current, seen 0.07s ago")
    cols.row("Maximum Messages", 1000)
    assert cols.render() == (
        "Information for Stream ORDERS created 2021-02-05T12:07:34+01:00\n"
        "\n"
        "Configuration:\n"
        "\n"
        "          Replicas: 3\n"
        "\n"
        "Cluster Information:\n"
        "\n"
        "              Name: C1\n"
        "            Leader: n1-c1\n"
        "           Replica: n4-c1, current, seen 0.07s ago\n"
        "  Maximum Messages: 1,000\n"
    )


def test_columns_skip_false_conditions_and_format_booleans_and_lists() -> None:
    cols = Columns("")
    cols.row_if("Sealed", True, False)
    cols.row("Acknowledgments", True)
    cols.row("Subjects", ["a.>", "b"])
    assert cols.render() == "  Acknowledgments: true\n         Subjects: a.>, b\n"


def test_table_is_drawn_with_rounded_corners_and_a_centred_title() -> None:
    text = render_table("Streams", ["Name", "Size"], [["ORDERS", "308 B"], ["X", "1.0 KiB"]])
    assert text == (
        "╭──────────────────╮\n"
        "│     Streams      │\n"
        "├────────┬─────────┤\n"
        "│ Name   │ Size    │\n"
        "├────────┼─────────┤\n"
        "│ ORDERS │ 308 B   │\n"
        "│ X      │ 1.0 KiB │\n"
        "╰────────┴─────────╯\n"
    )


def test_a_title_wider_than_the_cells_widens_the_last_column() -> None:
    lines = render_table("A very long title here", ["A"], [["x"]]).splitlines()
    assert len({len(line) for line in lines}) == 1
    assert "A very long title here" in lines[1]


@settings(derandomize=True)
@given(st.integers(min_value=0, max_value=2**62))
def test_sizes_always_have_a_unit_and_at_most_four_digits(size: int) -> None:
    number, unit = ibytes(size).split(" ")
    assert unit in {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
    assert len(number.replace(".", "")) <= 4


@settings(derandomize=True)
@given(st.integers(min_value=1, max_value=2**62))
def test_every_duration_renders_with_a_unit(ns: int) -> None:
    assert humanize_duration(ns)[-1] in "sr"  # ...s, or "never"
