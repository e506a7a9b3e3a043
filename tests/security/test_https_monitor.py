"""Monitoring over HTTPS (`https_port`, `-ms`) with the client port's certificate."""

from __future__ import annotations

import json
import re
import ssl
import urllib.request
from pathlib import Path

import pytest

from appliance.config.flags import parse_run_args, resolve_run_options
from appliance.config.load import options_from_text
from appliance.errors import ConfigError
from appliance.testing.certs import TestCerts
from appliance.testing.process import ApplianceProcess, free_port


def tls_text(certs: TestCerts) -> str:
    return f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}" }}\n'


def test_https_options_and_their_checks(certs: TestCerts, tmp_path: Path) -> None:
    assert options_from_text(tls_text(certs) + "https_port: 8443", filename="h.conf").https_port == 8443
    assert options_from_text(tls_text(certs) + 'https: "127.0.0.1:8443"', filename="h.conf").http_host == "127.0.0.1"
    with pytest.raises(ConfigError, match="TLS cert and key required for HTTPS"):
        options_from_text("https_port: 8443", filename="h.conf")
    with pytest.raises(ConfigError, match=r"can't specify both HTTP \(8222\) and HTTPs \(8443\) ports"):
        options_from_text(tls_text(certs) + "http_port: 8222\nhttps_port: 8443", filename="h.conf")
    conf = tmp_path / "h.conf"
    conf.write_text(tls_text(certs))
    assert resolve_run_options(parse_run_args(["-c", str(conf), "-ms", "9443"])).https_port == 9443


@pytest.mark.integration
def test_varz_over_https(certs: TestCerts, tmp_path: Path) -> None:
    conf = tmp_path / "https.conf"
    port = free_port()
    conf.write_text(tls_text(certs))
    with ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1", "-ms", str(port)],
                          log_dir=tmp_path) as server:
        found = re.search(r"Starting https monitor on [\d.:]+:(\d+)", server.log())
        assert found is not None and int(found.group(1)) == port, server.log()
        context = ssl.create_default_context(cafile=certs.ca_file)
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/varz", context=context, timeout=10) as answer:
            varz = json.load(answer)
        assert varz["https_port"] == port and varz["http_port"] == 0
        assert varz["tls_required"] is True and "tls_verify" not in varz and varz["tls_timeout"] == 2
        with pytest.raises(OSError):  # plain HTTP to the HTTPS port gets no answer
            urllib.request.urlopen(f"http://127.0.0.1:{port}/varz", timeout=5).read()
