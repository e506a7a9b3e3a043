"""/accountz, /routez, /leafz, /gatewayz, /ipqueuesz, /stacksz, /raftz and unclean paths (`//varz`),
compared with the real nats-server 2.15.1: the product (`appliance run`, two workers, JetStream) and
nats-server (-js) each hold one nats-py client while the pages are fetched over raw HTTP. Shapes (keys
and JSON types) must match, and the values every client can observe: account names, the system
account, JetStream per account, client counts, no routes, no leaf nodes, error texts, redirects.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import nats
import pytest

from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
Page = tuple[int, dict[str, str], bytes]

JSON_PAGES = [
    "/accountz", "/accountz?acc=$G", "/accountz?acc=$SYS", "/routez", "/routez?subs=1", "/routez?subs=detail",
    "/leafz", "/leafz?subs=1", "/gatewayz", "/ipqueuesz",
]  # fmt: skip
EXACT_PAGES = [
    "/accountz?acc=nope", "/routez?subs=x", "/leafz?subs=x", "/ipqueuesz?all=x", "/raftz", "/raftz?acc=$G",
    "//varz", "//connz?subs=1", "/./varz", "/a/../varz", "/varz/",
]  # fmt: skip
PAGES = [*JSON_PAGES, *EXACT_PAGES, "/ipqueuesz?all=1", "/stacksz"]
# account detail keys nats-server has and we do not: the system services it imports into every account
# (`$SYS.REQ.ACCOUNT.<acc>.CONNZ` ...) and the system account exports (this server has no such services)
DETAIL_GAPS = frozenset({"imports", "exports"})


def raw_get(port: int, target: str) -> Page:
    """A GET of exactly `target` (no client-side path cleaning, no redirect following)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        body = dechunk(body)
    return int(lines[0].split(" ")[1]), headers, body


def dechunk(body: bytes) -> bytes:
    out = b""
    while True:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out
        out += rest[:size]
        body = rest[size + 2:]


def pages_while_a_client_holds(client_port: int, http_port: int) -> dict[str, Page]:
    async def hold() -> dict[str, Page]:
        client = await nats.connect(f"nats://127.0.0.1:{client_port}", name="holder")
        await client.subscribe("holder.>")
        await client.flush()
        try:
            return {page: await asyncio.to_thread(raw_get, http_port, page) for page in PAGES}
        finally:
            await client.close()

    return asyncio.run(asyncio.wait_for(hold(), 60))


@pytest.fixture(scope="module")
def real_pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Page]:
    http_port = free_port()
    store = tmp_path_factory.mktemp("nats-server-js")
    with NatsServer(["-m", str(http_port), "-js", "-sd", str(store)]) as server:
        deadline_pages = None
        for _ in range(200):
            try:
                raw_get(http_port, "/healthz")
                break
            except OSError:
                asyncio.run(asyncio.sleep(0.05))
        deadline_pages = pages_while_a_client_holds(server.port, http_port)
    return deadline_pages


@pytest.fixture(scope="module")
def our_pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Page]]:
    port, http_port = free_port(), free_port()
    directory = tmp_path_factory.mktemp("appliance")
    config = directory / "two.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\nhttp: 127.0.0.1:{http_port}\nappliance {{ workers: 2 }}\n"
                      f"jetstream {{ store_dir: {json.dumps(str(directory / 'js'))} }}\n")
    with ApplianceProcess(["-c", str(config)], log_dir=directory):
        yield pages_while_a_client_holds(port, http_port)


def shape(value: Any, skip: frozenset[str] = frozenset()) -> Any:
    """Keys recursively (less `skip`, at any depth), leaves by JSON type; list items as a set of shapes."""
    if isinstance(value, dict):
        return {key: shape(item, skip) for key, item in value.items() if key not in skip}
    if isinstance(value, list):
        return sorted({json.dumps(shape(item, skip), sort_keys=True) for item in value})
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


@pytest.mark.parametrize("page", JSON_PAGES)
def test_same_status_headers_and_shape_as_nats_server(real_pages: dict[str, Page], our_pages: dict[str, Page],
                                                      page: str) -> None:
    status, headers, body = real_pages[page]
    our_status, our_headers, our_body = our_pages[page]
    assert (our_status, our_headers["content-type"]) == (status, headers["content-type"]) == (200, "application/json")
    assert our_headers.get("access-control-allow-origin") == headers.get("access-control-allow-origin")
    real, ours = json.loads(body), json.loads(our_body)
    assert shape(ours, DETAIL_GAPS) == shape(real, DETAIL_GAPS)
    assert [key for key in ours] == [key for key in real], "key order"


@pytest.mark.parametrize("page", EXACT_PAGES)
def test_same_answer_as_nats_server(real_pages: dict[str, Page], our_pages: dict[str, Page], page: str) -> None:
    status, headers, body = real_pages[page]
    our_status, our_headers, our_body = our_pages[page]
    assert (our_status, our_body) == (status, body)
    assert our_headers.get("content-type") == headers.get("content-type")
    assert our_headers.get("location") == headers.get("location")


def test_values_every_client_can_observe_agree(real_pages: dict[str, Page], our_pages: dict[str, Page]) -> None:
    def page(pages: dict[str, Page], name: str) -> Any:
        return json.loads(pages[name][2])

    for pages in (real_pages, our_pages):
        listing = page(pages, "/accountz")
        assert (sorted(listing["accounts"]), listing["system_account"]) == (["$G", "$SYS"], "$SYS")
        routes = page(pages, "/routez")
        assert (routes["num_routes"], routes["routes"]) == (0, [])
        assert routes["server_name"] and routes["server_id"]
        assert (page(pages, "/leafz")["leafnodes"], page(pages, "/leafz")["leafs"]) == (0, [])
        gateways = page(pages, "/gatewayz")
        assert (gateways["outbound_gateways"], gateways["inbound_gateways"]) == ({}, {})
        assert page(pages, "/ipqueuesz") == {}  # nothing pending at rest: nothing listed
    for account, system, jetstream in (("$G", False, True), ("$SYS", True, False)):
        real = page(real_pages, f"/accountz?acc={account}")["account_detail"]
        ours = page(our_pages, f"/accountz?acc={account}")["account_detail"]
        for detail in (real, ours):
            assert detail["account_name"] == detail["name_tag"] == account
            assert detail.get("is_system", False) is system
            assert detail["jetstream_enabled"] is jetstream
            assert (detail["expired"], detail["complete"], detail["leafnode_connections"]) == (False, True, 0)
        assert ours["client_connections"] == real["client_connections"] == (1 if account == "$G" else 0)
    everything = page(our_pages, "/ipqueuesz?all=1")
    assert everything and all(value == {"pending": 0} for value in everything.values())
    assert all(value == {"pending": 0} for value in page(real_pages, "/ipqueuesz?all=1").values())


def test_stacksz_is_the_processes_stacks_as_text(real_pages: dict[str, Page], our_pages: dict[str, Page]) -> None:
    status, headers, body = real_pages["/stacksz"]
    our_status, our_headers, our_body = our_pages["/stacksz"]
    assert (our_status, our_headers["content-type"]) == (status, headers["content-type"]) == (200, "application/json")
    assert b"goroutine" in body
    assert b"thread" in our_body and b"File " in our_body
