"""Is the load generator the bottleneck? `appliance bench pubsub` side by side with a C client.

native/bench/reference/pubsub.c is a minimal C publisher + subscriber (two processes, plain
blocking writes and reads, nats bench's timing). This module compiles it once with the system C
compiler into a cache directory, then alternates it with `appliance bench pubsub` against the same
server (A B, B A, A B ...: each round runs both, the order swapping every round) and prints the medians and the ratios. Ratios near 1
mean the figures are the server's (and the machine's), not the Python load generator's.

    .venv/bin/python -m appliance.bench.reference --url nats://127.0.0.1:4222 --msgs 2000000 --size 128
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import click

from appliance.bench.plan import BenchRequest
from appliance.bench.run import run_bench
from appliance.bench.stats import median
from appliance.errors import ApplianceError

SOURCE = Path(__file__).resolve().parents[2] / "native" / "bench" / "reference" / "pubsub.c"
COMPILE_TIMEOUT_S = 60.0
RUN_TIMEOUT_EXTRA_S = 30.0  # on top of the client's own 10 s idle timeout and the run itself
CFLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror")


class ReferenceUnavailable(ApplianceError):
    """The C reference client could not be built or did not finish; the message says why."""


@dataclass(frozen=True, slots=True)
class Figures:
    """msgs/s of one pub+sub run: published, received (first to last message), and all over the run."""

    pub: float
    sub: float
    total: float


def parse_output(text: str) -> Figures:
    """The reference client's one JSON line."""
    try:
        data = json.loads(text.strip().splitlines()[-1])
        return Figures(float(data["pub_msgs_per_s"]), float(data["sub_msgs_per_s"]), float(data["total_msgs_per_s"]))
    except (IndexError, KeyError, TypeError, ValueError) as exc:
        raise ReferenceUnavailable(f"unexpected output from the C reference: {text[:200]!r}") from exc


def binary_name(source_text: bytes) -> str:
    """A build is reused only for the same source and flags."""
    digest = hashlib.sha256(source_text + " ".join(CFLAGS).encode()).hexdigest()[:16]
    return f"pubsub-{digest}"


def build(cache_dir: Path | None = None) -> Path:
    """Compile the reference client (once per source version); its path."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ReferenceUnavailable("no C compiler (cc or gcc) on PATH")
    try:
        source_text = SOURCE.read_bytes()
    except OSError as exc:
        raise ReferenceUnavailable(f"reference source missing: {exc}") from exc
    directory = cache_dir or Path(tempfile.gettempdir()) / f"appliance-bench-reference-{os.getuid()}"
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / binary_name(source_text)
    if binary.exists():
        return binary
    partial = binary.with_suffix(f".{os.getpid()}.tmp")
    done = subprocess.run([compiler, *CFLAGS, "-o", str(partial), str(SOURCE)], capture_output=True, text=True,
                          timeout=COMPILE_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise ReferenceUnavailable(f"the C reference did not compile: {done.stderr.strip()[:500]}")
    partial.replace(binary)  # atomic: a concurrent build never sees half a binary
    return binary


def host_and_port(url: str) -> tuple[str, str]:
    parts = urlsplit(url if "://" in url else "nats://" + url)
    if parts.username or parts.password:
        raise ReferenceUnavailable("the C reference client does not authenticate: use a server without auth")
    return parts.hostname or "127.0.0.1", str(parts.port or 4222)


def run_reference(binary: Path, url: str, msgs: int, size: int) -> Figures:
    host, port = host_and_port(url)
    try:
        done = subprocess.run([str(binary), host, port, str(msgs), str(size)], capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_EXTRA_S + msgs / 10_000, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ReferenceUnavailable("the C reference did not finish in time") from exc
    if done.returncode != 0:
        raise ReferenceUnavailable(f"the C reference failed: {done.stderr.strip()[:500]}")
    return parse_output(done.stdout)


def run_appliance_bench(url: str, msgs: int, size: int) -> Figures:
    report = run_bench(BenchRequest("pubsub", url=url, msgs=msgs, size=size))
    if report.errors:
        raise ReferenceUnavailable(f"appliance bench had {report.errors} errors: {report.first_error}")
    rows = {row.label: row.rate.msgs_per_s for row in report.totals}
    return Figures(rows["pub total"], rows["sub total"], rows["pub+sub total"])


@dataclass(frozen=True, slots=True)
class Round:
    load_average: float
    bench: Figures
    reference: Figures


def summary(rounds: Sequence[Round]) -> str:
    """A markdown table: medians of both clients and their ratios (appliance bench / C reference)."""
    assert rounds
    lines = ["| figure (msgs/s) | appliance bench | C reference | appliance bench / C reference |",
             "|---|---:|---:|---:|"]
    for name, label in (("sub", "subscriber rate"), ("pub", "publisher rate"), ("total", "pub+sub total")):
        ours = median([getattr(r.bench, name) for r in rounds])
        theirs = median([getattr(r.reference, name) for r in rounds])
        ratio = f"{ours / theirs:.2f}" if theirs > 0 else "–"
        lines.append(f"| {label} | {ours:,.0f} | {theirs:,.0f} | {ratio} |")
    loads = ", ".join(f"{r.load_average:.1f}" for r in rounds)
    lines += ["", f"Medians of {len(rounds)} alternating rounds (A B, B A, ...); 1-minute load average after each "
              f"round: {loads}."]
    return "\n".join(lines)


def alternate(url: str, msgs: int, size: int, rounds: int, *, binary: Path,
              log: Callable[[str], None] = print) -> list[Round]:
    results = []
    for number in range(rounds):
        if number % 2 == 0:  # A B, then B A: neither client always runs first
            bench = run_appliance_bench(url, msgs, size)
            reference = run_reference(binary, url, msgs, size)
        else:
            reference = run_reference(binary, url, msgs, size)
            bench = run_appliance_bench(url, msgs, size)
        results.append(Round(os.getloadavg()[0], bench, reference))
        log(f"round {number + 1}: appliance bench sub {bench.sub:,.0f} pub {bench.pub:,.0f} | "
            f"C reference sub {reference.sub:,.0f} pub {reference.pub:,.0f} msgs/s")
    return results


@click.command()
@click.option("--url", default="nats://127.0.0.1:4222", show_default=True)
@click.option("--msgs", default=2_000_000, show_default=True)
@click.option("--size", default=128, show_default=True)
@click.option("--rounds", default=3, show_default=True)
def main(url: str, msgs: int, size: int, rounds: int) -> None:
    """Alternate `appliance bench pubsub` and the C reference client against one server."""
    try:
        binary = build()
        results = alternate(url, msgs, size, rounds, binary=binary, log=lambda line: click.echo(line, err=True))
    except ApplianceError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(summary(results))


if __name__ == "__main__":
    main()
