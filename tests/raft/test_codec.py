"""RAFT messages survive the wire: encode/decode round trips; garbage raises only CorruptData."""

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.errors import CorruptData
from appliance.raft import codec
from appliance.raft.codec import decode_message, encode_message
from appliance.raft.types import (
    ConfState,
    Entry,
    EntryType,
    Message,
    MessageType,
    Snapshot,
    SnapshotMeta,
)

u64 = st.integers(0, 2**64 - 1)
names = st.text(min_size=1, max_size=12)
entries = st.builds(Entry, u64, u64, st.sampled_from(EntryType), st.binary(max_size=64))
snapshots = st.builds(
    Snapshot,
    st.builds(SnapshotMeta, u64, u64,
              st.lists(names, max_size=5, unique=True).map(lambda v: ConfState(tuple(sorted(v))))),
    st.binary(max_size=64))
messages = st.builds(
    Message, st.sampled_from(MessageType), names, names, term=u64, log_term=u64, index=u64,
    entries=st.lists(entries, max_size=4).map(tuple), commit=u64, reject=st.booleans(), reject_hint=u64,
    snapshot=st.none() | snapshots, context=st.sampled_from([b"", b"transfer"]))


@settings(deadline=None)  # the machine is shared: no per-example deadline
@given(messages)
def test_messages_round_trip(message: Message) -> None:
    assert decode_message(encode_message(message)) == message


@settings(deadline=None)  # the machine is shared: no per-example deadline
@given(messages, st.data())
def test_damaged_messages_raise_corrupt_data_only(message: Message, data: st.DataObject) -> None:
    raw = bytearray(encode_message(message))
    cut = data.draw(st.integers(0, len(raw) - 1))
    variants = [bytes(raw[:cut]), bytes(raw) + b"x"]
    raw[cut] ^= 0xFF
    variants.append(bytes(raw))
    for variant in variants:
        try:
            decode_message(variant)
        except CorruptData:
            continue


@settings(deadline=None)  # the machine is shared: no per-example deadline
@given(st.lists(messages, min_size=1, max_size=8))
def test_cached_peer_ids_change_no_byte(batch: list[Message]) -> None:
    """The encoded peer ids are cached (bounded): a message encodes to the same bytes whether its
    names were seen before or not, and every one of a batch sharing names round-trips."""
    codec._texts.clear()
    first = [encode_message(m) for m in batch]
    again = [encode_message(m) for m in batch]
    assert first == again and [decode_message(raw) for raw in again] == batch
    for m, raw in zip(batch, first):
        sender = m.sender.encode()
        assert raw[codec.HEADER.size:codec.HEADER.size + 2 + len(sender)] == len(sender).to_bytes(2, "little") + sender
    assert len(codec._texts) <= codec.TEXTS_CACHED_MAX


@given(st.integers(0, 255).filter(lambda k: k not in {int(t) for t in MessageType}))
def test_an_unknown_message_type_is_corrupt_data(kind: int) -> None:
    raw = bytearray(encode_message(Message(MessageType.APPEND_RESP, "a", "b")))
    raw[1] = kind
    try:
        decode_message(bytes(raw))
    except CorruptData as error:
        assert "type" in str(error)
    else:
        raise AssertionError("decoded an unknown message type")
