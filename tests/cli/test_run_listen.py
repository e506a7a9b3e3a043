"""Where `appliance run` listens: as nats-server (0.0.0.0) unless told otherwise, except the
embedded default of a bare `appliance run` (`make run`), which names 127.0.0.1 itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.cli.run import options_for


@pytest.mark.parametrize(
    "argv",
    [["-p", "4333"], ["-js"], ["-n", "n1", "-m", "8222"], ["-js", "-sd", "/tmp/x"]],
)
def test_flags_without_an_address_listen_on_every_interface_as_nats_server(argv: list[str]) -> None:
    options, _ = options_for(argv)
    assert options.host == "0.0.0.0"
    assert options.http_host == "0.0.0.0"


def test_a_config_without_listen_or_host_listens_on_every_interface(tmp_path: Path) -> None:
    config = tmp_path / "s.conf"
    config.write_text("port: 4333\n")
    assert options_for(["-c", str(config)])[0].host == "0.0.0.0"


def test_an_explicit_address_is_kept(tmp_path: Path) -> None:
    assert options_for(["-a", "127.0.0.1", "-p", "4333"])[0].host == "127.0.0.1"
    config = tmp_path / "s.conf"
    config.write_text("listen: 127.0.0.1:4333\n")
    assert options_for(["-c", str(config)])[0].host == "127.0.0.1"


def test_the_embedded_default_listens_on_localhost(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    options, _ = options_for([])
    assert (options.host, options.port, options.http_host) == ("127.0.0.1", 4222, "127.0.0.1")
    assert options.jetstream.enabled
