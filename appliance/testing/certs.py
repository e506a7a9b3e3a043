"""Certificates made per test run with trustme (a test dependency): a CA, a server certificate
for 127.0.0.1/localhost and client certificates, written as PEM files into a temp dir. No key is
ever committed."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True, slots=True)
class Pair:
    cert: str
    key: str


class TestCerts:
    __test__ = False  # not a pytest class

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ca = trustme.CA(organization_name="appliance test CA")
        self.ca_file = str(directory / "ca.pem")
        self.ca.cert_pem.write_to_path(self.ca_file)
        self.server = self.issue("server", "127.0.0.1", "localhost")
        self.other_ca = trustme.CA(organization_name="someone else")

    def issue(self, name: str, *identities: str, common_name: str | None = None, organization: str | None = None,
              unit: str | None = None, ca: trustme.CA | None = None) -> Pair:
        leaf = (ca or self.ca).issue_cert(*identities, common_name=common_name, organization_name=organization,
                                          organization_unit_name=unit)
        cert = str(self.directory / f"{name}-cert.pem")
        key = str(self.directory / f"{name}-key.pem")
        leaf.cert_chain_pems[0].write_to_path(cert)
        leaf.private_key_pem.write_to_path(key)
        return Pair(cert, key)

    def client_context(self, pair: Pair | None = None) -> ssl.SSLContext:
        """What a client trusting our CA uses (with a client certificate when given)."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if pair is not None:
            context.load_cert_chain(pair.cert, pair.key)
        return context
