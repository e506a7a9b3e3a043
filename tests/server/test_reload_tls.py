"""diff_options for certificates (SIGHUP): new certificate files — even in the same paths — are a
change nats-server reloads (`Reloaded: tls = enabled`, `Reloaded: cluster`); turning route TLS on
or off is refused. Certificates made per run (trustme)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import options_from_text
from appliance.config.options import ServerOptions
from appliance.server.reload import diff_options
from appliance.testing.certs import TestCerts

ALWAYS = ["Reloaded: authorization users", "Reloaded: accounts"]


@pytest.fixture
def certs(tmp_path: Path) -> TestCerts:
    return TestCerts(tmp_path)


def tls(certs: TestCerts) -> str:
    return f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}", ca_file: "{certs.ca_file}" }}'


def opts(text: str) -> ServerOptions:
    return options_from_text(text, filename="server.conf")


def cluster(block: str) -> str:
    return f"port: 4222\ncluster {{ name: C1, listen: 127.0.0.1:6222\n{block}\n}}\n"


def test_same_certificate_files_are_no_change(certs: TestCerts) -> None:
    text = f"port: 4222\n{tls(certs)}\n" + cluster(tls(certs))
    assert diff_options(opts(text), opts(text)).changes == ALWAYS


def test_new_contents_in_the_same_paths_reload_client_and_route_certificates(certs: TestCerts) -> None:
    text = f"port: 4222\n{tls(certs)}\n" + cluster(tls(certs))
    before = opts(text)
    certs.issue("server", "127.0.0.1", "localhost", ca=certs.other_ca)
    diff = diff_options(before, opts(text))
    assert diff.error is None
    assert diff.changes == [*ALWAYS, "Reloaded: cluster", "Reloaded: tls = enabled"]


def test_turning_route_tls_on_is_refused(certs: TestCerts) -> None:
    diff = diff_options(opts(cluster("")), opts(cluster(tls(certs))))
    assert diff.error == ("config reload not supported for cluster tls: turning route TLS on or off needs a "
                          "restart in this build")
