"""The server id has nats-server's shape: a server public nkey."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from appliance.supervisor.identity import crc16_xmodem, generate_server_id, is_server_id

SEEN_ON_NATS_SERVER_2_15_1 = "NBYYUA6JA3VZQM75OFK56G5RFSSOBTH4QBRZY2E2A4MQ2237KBDRAUFF"


def test_an_id_of_the_real_nats_server_passes_our_check() -> None:
    assert is_server_id(SEEN_ON_NATS_SERVER_2_15_1)


def test_crc16_xmodem_check_value() -> None:
    assert crc16_xmodem(b"123456789") == 0x31C3  # the standard check value of CRC-16/XMODEM


@given(st.binary(min_size=32, max_size=32))
def test_generated_ids_are_well_formed(key: bytes) -> None:
    server_id = generate_server_id(lambda size: key[:size])
    assert len(server_id) == 56
    assert server_id.startswith("N")
    assert server_id.isalnum() and server_id.upper() == server_id
    assert is_server_id(server_id)


def test_ids_differ_per_call() -> None:
    assert generate_server_id() != generate_server_id()


def test_damaged_ids_are_rejected() -> None:
    good = SEEN_ON_NATS_SERVER_2_15_1
    assert not is_server_id(good[:-1] + ("A" if good[-1] != "A" else "B"))
    assert not is_server_id("U" + good[1:])
    assert not is_server_id(good[:-1])
    assert not is_server_id(good[:-1] + "1")  # not base32
