"""Rendering in the `nats` CLI's shape: pure functions from values to text, no I/O, no clock.

The layout rules are those of the `nats` CLI (natscli `columns` and go-pretty tables):
- a column report has a heading, then rows `label: value` whose labels are right-aligned to
  the longest label of the whole report plus two spaces, and section titles `Title:` framed by
  blank lines;
- durations read `2m0s`, `1d0h0m0s`, `30.00s`, `150ms`; sizes `308 B`, `1.0 KiB`, `10 KiB`;
  counts carry thousands separators (`1,234`);
- a table is drawn with rounded box characters, a centred title and left-aligned cells.
Every function takes what it shows (and the time zone or `now` it needs) as arguments.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo

from appliance.durations import go_duration

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
DURATION_NEVER_NS = 2**63 - 1  # Go's math.MaxInt64 duration: "never"
ZERO_TIME_TEXT = "0001-01-01T00:00:00Z"

_IEC_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_GO_TIME = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def comma(value: int) -> str:
    """An integer with thousands separators, as go-humanize's Comma."""
    return f"{value:,}"


def ibytes(size: int) -> str:
    """A byte count in IEC units as go-humanize's IBytes: `9 B`, `308 B`, `1.0 KiB`, `10 KiB`."""
    assert size >= 0
    if size < 10:
        return f"{size} B"
    exponent = min(math.floor(math.log(size) / math.log(1024)), len(_IEC_UNITS) - 1)
    value = math.floor(size / 1024**exponent * 10 + 0.5) / 10
    return f"{value:.1f} {_IEC_UNITS[exponent]}" if value < 10 else f"{value:.0f} {_IEC_UNITS[exponent]}"


def humanize_duration(ns: int) -> str:
    """natscli's HumanizeDuration: `never`, `150ms`, `30.00s`, `2m0s`, `1h0m0s`, `1d0h0m0s`, `1y...`."""
    if ns >= DURATION_NEVER_NS:
        return "never"
    if ns < NS_PER_MS:
        return go_duration(_round_to(ns, NS_PER_US))
    if ns < NS_PER_S:
        return go_duration(_round_to(ns, NS_PER_MS))
    total_s = ns // NS_PER_S
    minutes, hours, days = total_s // 60, total_s // 3600, total_s // 86400
    years = days // 365
    if years:
        return f"{years}y{days % 365}d{hours % 24}h{minutes % 60}m{total_s % 60}s"
    if days:
        return f"{days}d{hours % 24}h{minutes % 60}m{total_s % 60}s"
    if hours:
        return f"{hours}h{minutes % 60}m{total_s % 60}s"
    if minutes:
        return f"{minutes}m{total_s % 60}s"
    return f"{ns / NS_PER_S:.2f}s"


def _round_to(ns: int, unit_ns: int) -> int:
    """Go's Duration.Round for positive values: halves away from zero."""
    return (ns + unit_ns // 2) // unit_ns * unit_ns


def seen_ago(active_ns: int) -> str:
    """How long ago a replica was heard from, as in the seeds: `seen 0.07s ago`, `not seen`."""
    if active_ns <= 0 or active_ns >= DURATION_NEVER_NS:
        return "not seen"
    if active_ns < 60 * NS_PER_S:
        return f"seen {active_ns / NS_PER_S:.2f}s ago"
    return f"seen {humanize_duration(active_ns)} ago"


def parse_go_time(text: str) -> datetime | None:
    """An API timestamp (RFC 3339, nanoseconds, usually `Z`) as an aware datetime; None for zero time."""
    if not text or text == ZERO_TIME_TEXT:
        return None
    found = _GO_TIME.match(text)
    if found is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second = (int(part) for part in found.groups()[:6])
    micros = int((found.group(7) or "0")[:6].ljust(6, "0"))
    zone = found.group(8)
    offset = UTC if zone == "Z" else _offset(zone)
    return datetime(year, month, day, hour, minute, second, micros, tzinfo=offset)


def _offset(zone: str) -> timezone:
    sign = -1 if zone[0] == "-" else 1
    return timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))


def local_time(moment: datetime, tz: tzinfo | None) -> str:
    """natscli's f(time): `2006-01-02 15:04:05` in the given zone (None: the machine's)."""
    return moment.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S")


def rfc3339_local(moment: datetime, tz: tzinfo | None) -> str:
    """`2021-02-05T12:07:34+01:00` as in the seeds' headings; `Z` for UTC, as Go prints it."""
    text = moment.astimezone(tz).replace(microsecond=0).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def since_ns(earlier: datetime | None, reference: datetime) -> int:
    """Nanoseconds from `earlier` to `reference` (0 when unknown or in the future)."""
    if earlier is None:
        return 0
    delta = reference - earlier
    return max(0, (delta.days * 86400 + delta.seconds) * NS_PER_S + delta.microseconds * NS_PER_US)


def value_text(value: object) -> str:
    """natscli's F(): booleans `true`/`false`, integers with separators, lists joined by `, `."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return comma(value)
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value)
    return str(value)


@dataclass(frozen=True, slots=True)
class _Row:
    label: str
    value: str


@dataclass(frozen=True, slots=True)
class _Title:
    text: str


@dataclass
class Columns:
    """A natscli column report: heading, `label: value` rows aligned as one block, titled sections."""

    heading: str
    items: list[_Row | _Title] = field(default_factory=list)

    def row(self, label: str, value: object) -> None:
        self.items.append(_Row(label, value_text(value)))

    def row_if(self, label: str, value: object, condition: bool) -> None:
        if condition:
            self.row(label, value)

    def title(self, text: str) -> None:
        self.items.append(_Title(text))

    def render(self) -> str:
        longest = max((len(item.label) for item in self.items if isinstance(item, _Row)), default=0)
        lines = [self.heading, ""] if self.heading else []
        previous: _Row | _Title | None = None
        for item in self.items:
            if isinstance(item, _Title):
                if previous is not None and not isinstance(previous, _Title):
                    lines.append("")
                lines.extend([item.text if item.text.endswith(":") else item.text + ":", ""])
            elif item.label:
                lines.append(f"{' ' * (longest - len(item.label) + 2)}{item.label}: {item.value}")
            else:
                lines.append(f"{' ' * (longest + 3)} {item.value}")
            previous = item
        return "\n".join(lines) + "\n"


def render_table(
    title: str,
    headers: list[str],
    rows: list[list[str]],
    footer: list[str] | None = None,
    *,
    right: frozenset[int] = frozenset(),
    separators: frozenset[int] = frozenset(),
) -> str:
    """A go-pretty StyleRounded table as natscli draws it: title centred, cells left-aligned.

    `right`: columns go-pretty right-aligns (header, rows and footer) because every row holds a
    number there (natscli passes an int, not a formatted string); `separators`: row indexes a
    separator line goes before (AppendSeparator).
    """
    body = [headers, *rows, *([footer] if footer else [])]
    widths = [max(len(line[index]) for line in body) for index in range(len(headers))]
    inner = sum(widths) + 3 * len(widths) - 1

    def line(cells: list[str]) -> str:
        padded = (
            f" {cell.rjust(width) if index in right else cell.ljust(width)} "
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )
        text = "│" + "│".join(padded) + "│"
        return text.rstrip()

    def rule(start: str, middle: str, end: str) -> str:
        return start + middle.join("─" * (width + 2) for width in widths) + end

    out: list[str] = []
    if title:
        inner = max(inner, len(title) + 2)
        widths[-1] += inner - (sum(widths) + 3 * len(widths) - 1)
        out.append("╭" + "─" * inner + "╮")
        out.append("│" + title.center(inner) + "│")
        out.append(rule("├", "┬", "┤"))
    else:
        out.append(rule("╭", "┬", "╮"))
    out.append(line(headers))
    out.append(rule("├", "┼", "┤"))
    for index, row in enumerate(rows):
        if index in separators and index > 0:
            out.append(rule("├", "┼", "┤"))
        out.append(line(row))
    if footer:
        out.append(rule("├", "┼", "┤"))
        out.append(line(footer))
    out.append(rule("╰", "┴", "╯"))
    return "\n".join(out) + "\n"
