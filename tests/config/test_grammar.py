"""The NATS config grammar, trap by trap (spec/config-format.md §1), at the tree level."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from appliance.config.lexer import TokenKind, tokenize
from appliance.config.parser import ConfigMap, parse_text, to_plain
from appliance.errors import ConfigError


def tree(text: str, env: dict[str, str] | None = None) -> dict[str, object]:
    parsed = parse_text(text, filename="t.conf", env=env or {})
    plain = {key: to_plain(entry.value) for key, entry in parsed.items()}
    return plain


def problem(text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_text(text, filename="t.conf", env=env or {})
    assert len(caught.value.problems) == 1
    return caught.value.problems[0]


# --- separators, terminators, top-level braces ----------------------------------------------
@pytest.mark.parametrize("text", ["port 4222", "port: 4222", "port = 4222", "port=4222", "port\t:\t4222", "port\n4222"])
def test_equals_colon_and_whitespace_all_separate_key_and_value(text: str) -> None:
    assert tree(text) == {"port": 4222}


def test_entries_end_at_newline_semicolon_or_comma() -> None:
    assert tree("a: 1; b: 2, c: 3\nd: 4") == {"a": 1, "b": 2, "c": 3, "d": 4}


def test_the_whole_file_may_be_wrapped_in_braces() -> None:
    assert tree("{\n  host 127.0.0.1; port = 4999\n}\n") == {"host": "127.0.0.1", "port": 4999}


def test_a_stray_closing_brace_ends_a_top_level_value() -> None:
    assert tree("port: 4222}\n") == {"port": 4222}


def test_comments_hash_and_double_slash_anywhere_a_token_may_start() -> None:
    text = "// slash\n# hash\nport: 1 // after\nm { # in map\n a: [ # in array\n  1 // one\n ]\n}\n"
    assert tree(text) == {"port": 1, "m": {"a": [1]}}


def test_last_duplicate_key_wins() -> None:
    assert tree("port: 1\nport: 2") == {"port": 2}


# --- maps and arrays ------------------------------------------------------------------------
def test_maps_nest_and_take_any_separator() -> None:
    text = "cluster {\n name: C1, listen = 127.0.0.1:6222; pool_size 3\n}"
    assert tree(text) == {"cluster": {"name": "C1", "listen": "127.0.0.1:6222", "pool_size": 3}}


def test_maps_need_no_separator_before_the_brace() -> None:
    assert tree("jetstream {\n store_dir=/x\n}") == {"jetstream": {"store_dir": "/x"}}


def test_arrays_split_on_commas_or_newlines() -> None:
    assert tree("a: [\n x\n y, z\n \"w\"\n]") == {"a": ["x", "y", "z", "w"]}


def test_an_integer_does_not_end_at_a_closing_bracket_as_in_nats_server() -> None:
    assert "array value terminator" in problem("server_tags: [1]\n")


def test_an_empty_array_and_map_are_values() -> None:
    assert tree("a: []\nb: {}") == {"a": [], "b": {}}


def test_a_key_without_a_value_at_the_end_is_invalid() -> None:
    assert problem("foo") == "t.conf:1:1: config is invalid: key 'foo' has no value"


# --- strings --------------------------------------------------------------------------------
def test_double_quoted_strings_take_the_six_escapes() -> None:
    assert tree(r'a: "t\tn\nr\rq\"b\\x\x41"') == {"a": 't\tn\nr\rq"b\\xA'}


def test_hex_escapes_are_raw_bytes_decoded_as_utf8() -> None:
    assert tree(r'a: "\xc3\xa9t\xc3\xa9"') == {"a": "été"}
    assert tree(r'a: "bad\xff"') == {"a": "bad\ufffd"}
    assert "Expected two hexadecimal digits" in problem(r'a: "\xZZ"')


def test_any_other_escape_is_a_parse_error() -> None:
    assert "Invalid escape character 'q'" in problem(r'a: "\q"')


def test_single_quoted_strings_are_raw() -> None:
    assert tree(r"a: 'raw\npw'") == {"a": "raw\\npw"}


def test_unquoted_strings_end_at_whitespace_and_terminators() -> None:
    assert tree("a: nats://h:1/x?y#z\nb: x,c: y") == {"a": "nats://h:1/x?y#z", "b": "x", "c": "y"}


def test_a_token_starting_with_a_digit_that_is_not_a_number_is_a_string() -> None:
    assert tree("a: 30s\nb: 1h30m\nc: 500ms\nd: 127.0.0.1\ne: 0.0.0.0:4222") == {
        "a": "30s", "b": "1h30m", "c": "500ms", "d": "127.0.0.1", "e": "0.0.0.0:4222",
    }


def test_raw_block_ends_at_a_parenthesis_alone_on_its_line() -> None:
    assert tree("a: (\nline (x)\n  two\n)\nb: 1") == {"a": "\nline (x)\n  two\n", "b": 1}


# --- numbers, booleans, datetimes -------------------------------------------------------------
@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("1k", 1000), ("1kb", 1024), ("1ki", 1024), ("1kib", 1024), ("1K", 1000), ("1KB", 1024),
        ("2m", 2_000_000), ("2MB", 2 * 1024**2), ("2mi", 2 * 1024**2), ("2MiB", 2 * 1024**2),
        ("1g", 10**9), ("1G", 10**9), ("1gb", 2**30), ("1t", 10**12), ("1tb", 2**40),
        ("1p", 10**15), ("1pib", 2**50), ("1e", 10**18), ("1EB", 2**60), ("-1k", -1000), ("-5", -5),
    ],
)
def test_size_suffixes_on_unquoted_integers(literal: str, value: int) -> None:
    assert tree(f"a: {literal}") == {"a": value}


def test_a_quoted_size_is_just_a_string() -> None:
    assert tree('a: "1G"') == {"a": "1G"}


def test_an_unknown_size_suffix_is_an_error() -> None:
    assert "invalid size suffix" in problem("a: 2mbbb")


def test_integers_beyond_int64_are_out_of_range() -> None:
    assert "out of the range" in problem("a: 9223372036854775808")
    assert "out of the range" in problem("a: 9000000000000E")


def test_floats_need_a_leading_digit() -> None:
    assert tree("a: 1.5\nb: -0.25") == {"a": 1.5, "b": -0.25}
    assert "Floats must start with a digit" in problem("a: .5")


@pytest.mark.parametrize("word", ["true", "TRUE", "yes", "Yes", "on", "ON"])
def test_true_booleans_are_case_insensitive(word: str) -> None:
    assert tree(f"a: {word}") == {"a": True}


@pytest.mark.parametrize("word", ["false", "False", "no", "NO", "off", "Off"])
def test_false_booleans_are_case_insensitive(word: str) -> None:
    assert tree(f"a: {word}") == {"a": False}


def test_a_quoted_boolean_is_a_string() -> None:
    assert tree('a: "true"') == {"a": "true"}


def test_zulu_datetimes() -> None:
    assert tree("a: 2021-02-05T12:07:34Z") == {"a": datetime(2021, 2, 5, 12, 7, 34, tzinfo=timezone.utc)}
    assert "Expected 'Z' in ISO8601 datetime" in problem("a: 2021-02-05T12:07:34+01:00")
    assert "expected Zulu formatted DateTime" in problem("a: 2021-13-05T12:07:34Z")


# --- variables ------------------------------------------------------------------------------
def test_variables_resolve_keys_defined_above_in_enclosing_maps() -> None:
    text = "PORT_X: 4777\nport: $PORT_X\nc { inner: 1\n m { v: $inner, w: $PORT_X } }"
    assert tree(text) == {"PORT_X": 4777, "port": 4777, "c": {"inner": 1, "m": {"v": 1, "w": 4777}}}


def test_the_innermost_scope_wins() -> None:
    assert tree("x: 1\nm { x: 2, y: $x }\nz: $x") == {"x": 1, "m": {"x": 2, "y": 2}, "z": 1}


def test_a_key_defined_below_is_not_visible() -> None:
    assert problem("a: $later\nlater: 1") == "t.conf:1:4: variable reference for 'later' on line 1 can not be found"


def test_a_used_variable_is_marked_so_the_loader_accepts_it() -> None:
    parsed = parse_text("P: 1\nport: $P\nQ: 2", filename="t.conf", env={})
    assert parsed["P"].value.used_as_variable
    assert not parsed["Q"].value.used_as_variable


def test_environment_values_are_reparsed_as_config_values() -> None:
    env = {"MYP": "4888", "TAGS": "[a, b\n]", "FLAG": "yes", "NAME": "n1"}
    assert tree("a: $MYP\nb: $TAGS\nc: $FLAG\nd: $NAME", env) == {"a": 4888, "b": ["a", "b"], "c": True, "d": "n1"}


def test_environment_variables_may_refer_to_other_environment_variables() -> None:
    assert tree("a: $A", {"A": "$B", "B": "42"}) == {"a": 42}


def test_environment_reference_cycles_are_detected() -> None:
    assert "variable reference cycle for 'A'" in problem("a: $A", {"A": "$B", "B": "$A"})
    assert "variable reference cycle for 'S'" in problem("a: $S", {"S": "$S"})


def test_an_undefined_variable_names_the_line() -> None:
    assert problem("\nport: $NOPE_VAR") == "t.conf:2:7: variable reference for 'NOPE_VAR' on line 2 can not be found"


def test_unquoted_2a_bcrypt_hash_is_literal_but_2b_and_2y_are_variables() -> None:
    assert tree("p: $2a$11$abc/def") == {"p": "$2a$11$abc/def"}
    assert "'2b$11$abc' on line 1 can not be found" in problem("p: $2b$11$abc")
    assert "'2y$11$abc' on line 1 can not be found" in problem("p: $2y$11$abc")
    assert tree('p: "$2b$11$abc"') == {"p": "$2b$11$abc"}


def test_a_dollar_key_is_an_ordinary_key() -> None:
    assert tree("accounts { $SYS { users: [] } }") == {"accounts": {"$SYS": {"users": []}}}


# --- positions ------------------------------------------------------------------------------
def test_every_value_keeps_file_line_and_column() -> None:
    parsed = parse_text("a: 1\n  b {\n    c: [x, \"y\"]\n  }\n", filename="f.conf", env={})
    entry = parsed["b"]
    assert (entry.key_position.line, entry.key_position.column) == (2, 3)
    inner = entry.value.data
    assert isinstance(inner, ConfigMap)
    items = inner["c"].value.data
    assert isinstance(items, list)
    assert [(item.position.file, item.position.line, item.position.column) for item in items] == [
        ("f.conf", 3, 9), ("f.conf", 3, 12),
    ]


def test_syntax_errors_carry_file_line_and_column() -> None:
    assert problem("a: 1\nb: \"x\\q\"\n").startswith("t.conf:2:")


def test_syntax_errors_say_parse_error_as_nats_server_does() -> None:
    assert problem("port: 4333\nserver_name: a b c }\n") == (
        "t.conf:2:17: Parse error on line 2: 'Expected a top-level value to end with a new line, comment or EOF, "
        "but got 'b' instead.'")


# --- tokens ---------------------------------------------------------------------------------
def test_include_is_a_keyword_where_a_key_starts() -> None:
    kinds = [(t.kind, t.text) for t in tokenize("include ./inc/extra.conf\nm { include 'x.conf' }\n")]
    assert (TokenKind.INCLUDE, "./inc/extra.conf") in kinds
    assert (TokenKind.INCLUDE, "x.conf") in kinds


def test_unterminated_inputs_are_errors_not_hangs() -> None:
    for text in ['a: "abc', "a: 'abc", "a: (\nxx", "a { b: 1", "a: [1,", "a { 'k", '{ a: 1']:
        with pytest.raises(ConfigError):
            parse_text(text, filename="t.conf", env={})
