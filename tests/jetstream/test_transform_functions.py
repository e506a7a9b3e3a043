"""Subject mapping functions as pure functions (transform.py): the rules nats-server's
subject_transform.go follows, stated as properties, plus its refusals with their texts."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.jetstream.errors import JsApiError
from appliance.jetstream.transform import compile_transform, fnv32a, parse_token

TOKEN = st.text(alphabet="abcxyz-_0123456789", min_size=1, max_size=12)
SIZE = st.integers(min_value=-2, max_value=14)


def one(dest: str, subject_token: str) -> str:
    result = compile_transform("in.*", dest, of="stream").apply(f"in.{subject_token}")
    assert result is not None and result.startswith("p.")
    return result[2:]


def test_fnv32a_is_gos_hash_fnv_new32a() -> None:
    assert fnv32a(b"") == 0x811C9DC5
    assert fnv32a(b"a") == 0xE40C292C
    assert fnv32a(b"foobar") == 0xBF9CF968


@given(first=TOKEN, second=TOKEN, partitions=st.integers(min_value=1, max_value=1000))
def test_partition_hashes_the_named_wildcards_concatenated(first: str, second: str, partitions: int) -> None:
    named = compile_transform("o.*.*", f"p.{{{{partition({partitions},2,1)}}}}").apply(f"o.{first}.{second}")
    whole = compile_transform("o.*.*", f"p.{{{{partition({partitions})}}}}").apply(f"o.{first}.{second}")
    assert named == f"p.{fnv32a((second + first).encode()) % partitions}"
    assert whole == f"p.{fnv32a(f'o.{first}.{second}'.encode()) % partitions}"


def test_partition_of_zero_is_zero_and_negative_counts_wrap_as_uint32() -> None:
    assert compile_transform("o.*", "p.{{partition(0,1)}}").apply("o.k") == "p.0"
    assert compile_transform("o.*", "p.{{partition(-3,1)}}").apply("o.k") == f"p.{fnv32a(b'k') % (2**32 - 3)}"


@given(token=TOKEN, size=SIZE)
def test_slices_cover_the_token_in_pieces_of_the_size(token: str, size: int) -> None:
    left = one(f"p.{{{{slicefromleft(1,{size})}}}}", token).split(".")
    right = one(f"p.{{{{slicefromright(1,{size})}}}}", token).split(".")
    assert "".join(left) == token and "".join(right) == token
    if 0 < size < len(token):
        assert all(len(piece) == size for piece in left[:-1]) and 0 < len(left[-1]) <= size
        assert all(len(piece) == size for piece in right[1:]) and 0 < len(right[0]) <= size
    else:
        assert left == [token] and right == [token]


@given(token=TOKEN, position=SIZE)
def test_split_from_left_and_right_cut_once(token: str, position: int) -> None:
    left = one(f"p.{{{{splitfromleft(1,{position})}}}}", token).split(".")
    right = one(f"p.{{{{splitfromright(1,{position})}}}}", token).split(".")
    if 0 < position < len(token):
        assert left == [token[:position], token[position:]]
        assert right == [token[: len(token) - position], token[len(token) - position :]]
    else:
        assert left == right == [token]


@given(token=TOKEN, size=SIZE)
def test_left_and_right_keep_an_end(token: str, size: int) -> None:
    keep = size if 0 < size < len(token) else len(token)
    assert one(f"p.{{{{left(1,{size})}}}}", token) == token[:keep]
    assert one(f"p.{{{{right(1,{size})}}}}", token) == token[len(token) - keep :]


@given(token=TOKEN)
def test_split_drops_delimiters_and_never_leaves_empty_inner_tokens(token: str) -> None:
    out = one("p.{{split(1,-)}}", token)
    assert out.replace(".", "") == token.replace("-", "")
    assert ".." not in out and not out.endswith(".")


def test_split_keeps_nats_servers_leading_separator_quirk() -> None:
    assert one("p.{{split(1,-)}}", "-a--b-") == "a.b"
    assert one("p.{{split(1,-)}}", "--a") == ".a"
    assert one("p.{{split(1,)}}", "abc") == "a.b.c"


def test_wildcard_numbers_below_one_read_the_first_token() -> None:
    assert compile_transform("o.*.*", "p.$0.{{wildcard(-1)}}.$2").apply("o.a.b") == "p.o.o.b"
    assert compile_transform("o.*", "p.$x.$1$2").apply("o.a") == "p.$x.$1$2"


def test_full_wildcard_tail_and_no_wildcard_partition() -> None:
    assert compile_transform("o.>", "q.{{partition(4)}}.>").apply("o.a.b") == f"q.{fnv32a(b'o.a.b') % 4}.a.b"
    assert compile_transform("o.x", "q.{{partition(4,1)}}").apply("o.x") == f"q.{fnv32a(b'o.x') % 4}"
    assert compile_transform("o.x", "q.{{partition(4,1)}}").apply("o.y") is None


def test_slices_are_of_bytes_as_in_nats_server() -> None:
    assert one("p.{{left(1,2)}}", "h\u00e9llo") == "h\ufffd"  # half of a two-byte character


def test_random_draws_from_the_injected_rng() -> None:
    transform = compile_transform("r.*", "r.{{random(10)}}", rng=random.Random(7))
    expected = random.Random(7)
    for _ in range(5):
        assert transform.apply("r.x") == f"r.{expected.getrandbits(31) % 10}"
    assert compile_transform("r.*", "r.{{random(0)}}").apply("r.x") == "r.0"


def test_function_names_match_only_with_nats_servers_capitals() -> None:
    assert parse_token("{{SplitFromLeft(1,2)}}").kind == "splitfromleft"
    assert parse_token("{{Splitfromleft(1,2)}}").kind == "splitfromleft"
    assert parse_token("{{ partition( 3 , 1 ) }}").args == (1,)
    assert parse_token("{{}}").kind == "literal"
    assert parse_token("{{wildcard(1)}}x").kind == "literal"


REFUSED = [
    ("stream", "p.{{partition()}}", 10156,
     "function argument is invalid or in the wrong format in {{partition()}}"),
    ("stream", "p.{{split(1)}}", 10156, "not enough arguments passed to the function in {{split(1)}}"),
    ("stream", "p.{{split(1,-,x)}}", 10156, "too many arguments passed to the function in {{split(1,-,x)}}"),
    ("stream", "p.{{bogus(1)}}", 10156, "unknown function in {{bogus(1)}}"),
    ("stream", "p.{{LEFT(1,2)}}", 10156, "unknown function in {{LEFT(1,2)}}"),
    ("stream", "p.{{wildcard(3)}}", 10156, "wildcard index out of range in {{wildcard(3)}}: [3]"),
    ("stream", "p.{{random(1,2)}}", 10156, "not enough arguments passed to the function in {{random(1,2)}}"),
    ("stream", "p.{{left(1,99999999999)}}", 10156,
     "function argument is invalid or in the wrong format in {{left(1,99999999999)}}"),
    ("stream", "p.>.x", 10156, "invalid transform in x"),
    ("source", "p..x", 10146, "invalid transform"),
    ("mirror", "p.a b", 10154, "invalid transform"),
]


@pytest.mark.parametrize(("of", "dest", "code", "reason"), REFUSED)
def test_refusals_carry_nats_servers_code_and_text(of: str, dest: str, code: int, reason: str) -> None:
    with pytest.raises(JsApiError) as caught:
        compile_transform("in.*.*", dest, of=of)  # type: ignore[arg-type]
    assert caught.value.entry.err_code == code
    assert caught.value.description.endswith(f"invalid mapping destination: {reason}")


def test_shape_and_index_errors_refuse_the_destination() -> None:
    for src, dest in (("in.*.*", "p.*"), ("in.*", "p.>"), ("in.>", "p.$1x"), ("in.x", "q.$1")):
        with pytest.raises(JsApiError) as caught:
            compile_transform(src, dest, of="stream")
        assert caught.value.entry.err_code == 10156
    with pytest.raises(JsApiError) as caught:
        compile_transform("bad..", "x", of="stream")
    assert caught.value.description == "stream transform source: invalid subject bad.."
