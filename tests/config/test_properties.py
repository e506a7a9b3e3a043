"""Properties of the parser: write -> parse is the identity, and no input raises anything but ConfigError."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.config import options_from_text
from appliance.config.format import dumps
from appliance.config.parser import parse_text, to_plain
from appliance.errors import ConfigError

_KEY_START = "abcxyzABCXYZ_"
_KEY_REST = _KEY_START + "0123456789-"
KEYS = st.builds(str.__add__, st.sampled_from(_KEY_START), st.text(alphabet=_KEY_REST, max_size=8))
SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=-(10**6), max_value=10**6).map(lambda n: n / 64),
    st.text(max_size=20),
    st.integers(min_value=-30610224000, max_value=253402300799).map(
        lambda s: datetime.fromtimestamp(s, tz=timezone.utc)  # years 1000..9999, whole seconds
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(KEYS, children, max_size=4),
    ),
    max_leaves=12,
)
MAPPINGS = st.dictionaries(KEYS, VALUES, max_size=6)

# characters that steer the lexer into every state, plus some arbitrary ones
GRAMMAR_ALPHABET = " \t\n\r{}[]()=:;,#/\"'\\$-.0123456789abefkmgtxyzTZ_é"
SOURCES = st.one_of(st.text(alphabet=GRAMMAR_ALPHABET, max_size=120), st.text(max_size=60))


def parse_plain(text: str) -> dict[str, object]:
    tree = parse_text(text, filename="p.conf", env={})
    return {key: to_plain(entry.value) for key, entry in tree.items()}


@settings(max_examples=40, deadline=None)
@given(MAPPINGS)
def test_written_configs_parse_back_to_the_same_data(mapping: dict[str, object]) -> None:
    assert parse_plain(dumps(mapping)) == mapping


@settings(max_examples=15, deadline=None)
@given(MAPPINGS)
def test_the_optional_top_level_braces_change_nothing(mapping: dict[str, object]) -> None:
    assert parse_plain("{\n" + dumps(mapping) + "}\n") == mapping


def refuse_includes(path: str) -> str:
    raise ConfigError([f"{path}: includes are not available in this test"])


@settings(max_examples=200, deadline=None)
@given(SOURCES)
def test_any_text_parses_or_raises_config_error_only(text: str) -> None:
    try:
        parse_text(text, filename="f.conf", env={"A": "$B", "B": "1"}, read_file=refuse_includes)
    except ConfigError as error:
        assert error.problems and all(p.startswith("f.conf") for p in error.problems)


@settings(max_examples=120, deadline=None)
@given(SOURCES)
def test_any_text_loads_or_raises_config_error_only(text: str) -> None:
    try:
        options_from_text(text, filename="f.conf", env={}, read_file=refuse_includes)
    except ConfigError as error:
        assert error.problems


@settings(max_examples=25, deadline=None)
@given(MAPPINGS, st.sampled_from(["port", "cluster", "jetstream", "authorization", "accounts", "appliance", "max_payload"]))
def test_known_keys_with_arbitrary_values_load_or_raise_config_error_only(mapping: dict[str, object], key: str) -> None:
    values = list(mapping.values()) or [1]
    text = dumps({key: values[0]}) + dumps({"cluster": mapping}) if key != "cluster" else dumps({key: mapping})
    try:
        options_from_text(text, filename="f.conf", env={}, read_file=refuse_includes)
    except ConfigError as error:
        assert error.problems
