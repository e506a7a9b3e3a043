"""The C reference client that shows whether `appliance bench` itself is the bottleneck."""

import shutil
from pathlib import Path

import pytest

from appliance.bench import reference, servers
from appliance.bench.reference import Figures, ReferenceUnavailable, Round

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")


def test_its_output_is_one_json_line() -> None:
    line = '{"msgs": 10, "size": 1, "pub_msgs_per_s": 5.0, "sub_msgs_per_s": 4.0, "total_msgs_per_s": 8.5}\n'
    assert reference.parse_output(line) == Figures(pub=5.0, sub=4.0, total=8.5)
    with pytest.raises(ReferenceUnavailable, match="unexpected output"):
        reference.parse_output("")
    with pytest.raises(ReferenceUnavailable, match="unexpected output"):
        reference.parse_output('{"pub_msgs_per_s": 1}')


def test_a_build_is_reused_only_for_the_same_source() -> None:
    assert reference.binary_name(b"int main;") == reference.binary_name(b"int main;")
    assert reference.binary_name(b"int main;") != reference.binary_name(b"int main(void);")


def test_it_speaks_to_host_and_port_without_credentials() -> None:
    assert reference.host_and_port("nats://127.0.0.1:4333") == ("127.0.0.1", "4333")
    assert reference.host_and_port("localhost") == ("localhost", "4222")
    with pytest.raises(ReferenceUnavailable, match="does not authenticate"):
        reference.host_and_port("nats://user:pass@127.0.0.1:4222")


def test_the_summary_gives_medians_and_ratios() -> None:
    rounds = [Round(1.0, Figures(100.0, 90.0, 190.0), Figures(100.0, 100.0, 200.0)),
              Round(2.0, Figures(300.0, 110.0, 410.0), Figures(200.0, 100.0, 300.0)),
              Round(3.0, Figures(200.0, 100.0, 300.0), Figures(100.0, 100.0, 200.0))]
    lines = reference.summary(rounds).splitlines()
    assert lines[2] == "| subscriber rate | 100 | 100 | 1.00 |"
    assert lines[3] == "| publisher rate | 200 | 100 | 2.00 |"
    assert lines[4] == "| pub+sub total | 300 | 200 | 1.50 |"
    assert lines[-1].endswith("after each round: 1.0, 2.0, 3.0.")


@needs_cc
@pytest.mark.integration
def test_it_builds_once_and_measures_nats_server(tmp_path: Path, nats_server: servers.RunningServer) -> None:
    binary = reference.build(tmp_path)
    assert reference.build(tmp_path) == binary  # cached
    figures = reference.run_reference(binary, nats_server.url, msgs=20_000, size=16)
    assert figures.pub > 0 and figures.sub > 0 and figures.total > 0
    lines: list[str] = []
    rounds = reference.alternate(nats_server.url, 5_000, 16, 2, binary=binary, log=lines.append)
    assert len(rounds) == 2 and all(r.bench.sub > 0 and r.reference.sub > 0 for r in rounds)
    assert [line.split(":")[0] for line in lines] == ["round 1", "round 2"]


@needs_cc
@pytest.mark.integration
def test_an_unreachable_server_is_reported(tmp_path: Path) -> None:
    binary = reference.build(tmp_path)
    with pytest.raises(ReferenceUnavailable, match="could not connect"):
        reference.run_reference(binary, f"nats://127.0.0.1:{servers.free_port()}", msgs=10, size=1)
