"""Query parameters decode like nats-server's decodeBool/decodeInt/decodeUint64/decodeState."""

import pytest

from appliance.server.monitor.params import BadRequest, Query, go_quote


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_go_parse_bool_true_spellings(text: str) -> None:
    assert Query(f"subs={text}").boolean("subs") is True


@pytest.mark.parametrize("text", ["", "0", "f", "F", "FALSE", "false", "False"])
def test_go_parse_bool_false_spellings_and_absent(text: str) -> None:
    assert Query(f"subs={text}").boolean("subs") is False
    assert Query("").boolean("subs") is False


def test_bad_boolean_is_the_exact_nats_server_text() -> None:
    with pytest.raises(BadRequest) as caught:
        Query("subs=x").boolean("subs")
    assert (
        str(caught.value)
        == """Error decoding boolean for 'subs': strconv.ParseBool: parsing "x": invalid syntax"""
    )


def test_yes_is_not_a_go_boolean() -> None:
    with pytest.raises(BadRequest):
        Query("auth=yes").boolean("auth")


def test_first_value_wins_and_plus_is_a_space() -> None:
    query = Query("acc=A&acc=B&user=a+b")
    assert query.get("acc") == "A"
    assert query.get("user") == "a b"
    assert query.get("missing") == ""


def test_integers_follow_atoi() -> None:
    assert Query("offset=%2B5").integer("offset") == 5
    assert Query("offset=-5").integer("offset") == -5
    with pytest.raises(BadRequest) as caught:
        Query("offset=x").integer("offset")
    assert (
        str(caught.value) == """Error decoding int for 'offset': strconv.Atoi: parsing "x": invalid syntax"""
    )
    with pytest.raises(BadRequest) as too_big:
        Query("limit=99999999999999999999").integer("limit")
    assert str(too_big.value).endswith('parsing "99999999999999999999": value out of range')
    with pytest.raises(BadRequest):
        Query("offset=1_000").integer("offset")  # Python would accept it; Go does not


def test_unsigned_follows_parse_uint() -> None:
    assert Query("cid=42").unsigned("cid") == 42
    with pytest.raises(BadRequest) as caught:
        Query("cid=-1").unsigned("cid")
    assert (
        str(caught.value)
        == """Error decoding uint64 for 'cid': strconv.ParseUint: parsing "-1": invalid syntax"""
    )


def test_subs_detail_or_boolean() -> None:
    assert Query("subs=detail").subs() == (False, True)
    assert Query("subs=DETAIL").subs() == (False, True)
    assert Query("subs=1").subs() == (True, False)
    assert Query("").subs() == (False, False)


def test_state_names() -> None:
    assert Query("").state() == "open"
    assert Query("state=OPEN").state() == "open"
    assert Query("state=closed").state() == "closed"
    assert Query("state=all").state() == "any"
    assert Query("state=any").state() == "any"
    with pytest.raises(BadRequest) as caught:
        Query("state=bogus").state()
    assert str(caught.value) == "Error decoding state for bogus"


def test_go_quote_escapes_like_strconv_quote() -> None:
    assert go_quote("x") == '"x"'
    assert go_quote('a"b\\c') == '"a\\"b\\\\c"'
    assert go_quote("\n\t\x01") == '"\\n\\t\\x01"'
    assert go_quote("µ") == '"µ"'
