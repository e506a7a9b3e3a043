"""Account exports/imports at load (config/imports.py) and the subject mappings (config/subject_map.py):
nats-server's texts for refused imports, its authorization and cycle rules, and the mappings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.config.convert import Problems
from appliance.config.imports import Export, Import, ImportsExports, approved, resolve
from appliance.config.load import options_from_text
from appliance.config.subject_map import MappingError, SubjectMap, collide, is_subset
from appliance.server.imports import StreamRule


def problems(text: str) -> list[str]:
    try:
        options_from_text(text, filename="t.conf")
    except Exception as error:  # ConfigError carries every problem
        return str(error).splitlines()
    return []


def accounts(body: str) -> str:
    return "accounts {\n" + body + "\n}\n"


def test_a_stream_import_of_a_subject_not_exported_is_refused_at_the_accounts_block() -> None:
    found = problems(accounts('A: { exports: [{stream: "foo.>"}] }\n'
                              'B: { imports: [{stream: {account: A, subject: "bar.>"}, prefix: p}] }'))
    assert found and found[-1].endswith('t.conf:1:1: Error adding stream import "bar.>": stream import not authorized')


def test_an_account_not_listed_by_the_export_is_refused() -> None:
    text = accounts('A: { exports: [{stream: "foo.>", accounts: [C]}, {service: "req", accounts: [C]}] }\n'
                    'B: { imports: [{stream: {account: A, subject: "foo.x"}}, {service: {account: A, subject: "req"}}] }\n'
                    'C: { imports: [{stream: {account: A, subject: "foo.y"}}, {service: {account: A, subject: "req"}}] }')
    found = problems(text)
    assert [p.split(": ", 1)[1] for p in found if "Error adding" in p] == [
        'Error adding stream import "foo.x": stream import not authorized',
        'Error adding service import "req": service import not authorized',
    ]


def test_unknown_accounts_and_bad_prefixes() -> None:
    assert any('"Z" account not defined for stream import' in p
               for p in problems(accounts('B: { imports: [{stream: {account: Z, subject: "x"}}] }')))
    assert any('"Z" account not defined for service export' in p
               for p in problems(accounts('A: { exports: [{service: "x", accounts: [Z]}] }')))
    found = problems(accounts('A: { exports: [{stream: "foo.>"}] }\n'
                              'B: { imports: [{stream: {account: A, subject: "foo.>"}, prefix: "p.*"}] }'))
    assert any("stream import prefix can not contain wildcard tokens" in p for p in found)


def test_entry_shape_errors_are_nats_servers() -> None:
    assert any("Stream import can not have a 'prefix' and a 'to' property" in p for p in problems(accounts(
        'A: { exports: [{stream: "foo"}] }\nB: { imports: [{stream: {account: A, subject: foo}, prefix: p, to: q}] }')))
    assert any('Unknown response type: "forever"' in p
               for p in problems(accounts('A: { exports: [{service: "x", response_type: forever}] }')))
    assert any("Expect an account name and a subject" in p
               for p in problems(accounts('B: { imports: [{stream: {account: A}}] }')))
    assert any('Duplicate service import subject "q"' in p for p in problems(accounts(
        'A: { exports: [{service: "x"}, {service: "y"}] }\n'
        'B: { imports: [{service: {account: A, subject: x}, to: q}, {service: {account: A, subject: y}, to: q}] }')))


def test_cycles_are_refused() -> None:
    stream = accounts('A: { exports: [{stream: "foo.>"}], imports: [{stream: {account: B, subject: "foo.>"}}] }\n'
                      'B: { exports: [{stream: "foo.>"}], imports: [{stream: {account: A, subject: "foo.>"}}] }')
    assert any("import forms a cycle" in p for p in problems(stream))
    service = accounts('A: { exports: [{service: "q"}], imports: [{service: {account: B, subject: "q"}}] }\n'
                       'B: { exports: [{service: "q"}], imports: [{service: {account: A, subject: "q"}}] }')
    assert any("import forms a cycle" in p for p in problems(service))


def test_a_good_config_loads_typed() -> None:
    options = options_from_text(accounts(
        'A: { exports: [{stream: "foo.>"}, {service: "req.*", response_type: stream, threshold: "5s"}] }\n'
        'B: { imports: [{stream: {account: A, subject: "foo.>"}, to: "bar.>"}, '
        '{service: {account: A, subject: "req.*"}, to: "ask.*"}] }'), filename="t.conf")
    exports = options.accounts["A"].exports
    assert (exports[1].response_type, exports[1].response_threshold_s) == ("Streamed", 5.0)
    imports = options.accounts["B"].imports
    assert [(i.service, i.local) for i in imports] == [(False, "bar.>"), (True, "ask.*")]


def test_approval_takes_the_exact_export_then_a_wildcard_one() -> None:
    exporter = ImportsExports(exports=[Export("a.b", False, ("X",)), Export("a.>", False, None)])
    assert approved(exporter, "X", "a.b", service=False)
    assert not approved(exporter, "Y", "a.b", service=False)  # the exact export lists only X
    assert approved(exporter, "Y", "a.c", service=False)
    assert not approved(exporter, "Y", "b", service=False)
    assert not approved(exporter, "Y", "a.c", service=True)  # streams are not services


def test_resolve_keeps_the_accepted_imports_in_order() -> None:
    accepted = resolve({"A": ImportsExports(exports=[Export("s", True)]),
                        "B": ImportsExports(imports=[Import("A", "s", True, to="s"), Import("A", "t", True, to="t")])},
                       found := Problems(), None)
    assert [i.subject for i in accepted["B"]] == ["s"]
    assert found.errors == ['Error adding service import "t": service import not authorized']


# --- subject mappings -------------------------------------------------------------------------------

def test_mapping_by_wildcard_position() -> None:
    assert SubjectMap(b"foo.>", b"p.foo.>").apply(b"foo.a.b") == b"p.foo.a.b"
    assert SubjectMap(b"foo.*.x", b"bar.*").apply(b"foo.q.x") == b"bar.q"
    assert SubjectMap(b"a.*.*", b"b.*.*").apply(b"a.1.2") == b"b.1.2"
    assert SubjectMap(b"lit", b"other").apply(b"lit") == b"other"
    with pytest.raises(MappingError):
        SubjectMap(b"foo.*", b"bar")


def test_shadow_subjects_of_a_prefixed_import() -> None:
    rule = StreamRule("B", Import("A", "foo.>", False, prefix="p"))
    assert rule.shadow_subject(b"p.foo.>") == b"foo.>"
    assert rule.shadow_subject(b"p.foo.x") == b"foo.x"
    assert rule.shadow_subject(b"p.foo.*") == b"foo.*"
    assert rule.shadow_subject(b">") == b"foo.>"  # wider than the import: the whole export
    assert rule.shadow_subject(b"p.*.x") == b"foo.x"  # overlapping: the part inside the import
    assert rule.shadow_subject(b"q.>") is None
    assert rule.to_importer(b"foo.a.b") == b"p.foo.a.b"
    literal = StreamRule("B", Import("A", "foo.x", False, to="bar"))
    assert (literal.shadow_subject(b"bar"), literal.to_importer(b"foo.x")) == (b"foo.x", b"bar")


TOKEN = st.sampled_from([b"a", b"b", b"c", b"*"])


@given(st.lists(TOKEN, min_size=1, max_size=4), st.booleans(), st.lists(st.sampled_from([b"a", b"b", b"c"]),
                                                                          min_size=1, max_size=6))
def test_a_mapping_and_its_reverse_round_trip(parts: list[bytes], tail: bool, subject_parts: list[bytes]) -> None:
    src = b".".join(parts + ([b">"] if tail else []))
    dest = b"pre." + src
    forward = SubjectMap(src, dest)
    subject = b".".join(subject_parts)
    if not is_subset(subject, src):
        return
    mapped = forward.apply(subject)
    assert is_subset(mapped, dest)
    assert forward.reverse().apply(mapped) == subject


@given(st.lists(TOKEN, min_size=1, max_size=4), st.lists(TOKEN, min_size=1, max_size=4))
def test_a_subset_collides(a: list[bytes], b: list[bytes]) -> None:
    x, y = b".".join(a), b".".join(b)
    if is_subset(x, y):
        assert collide(x, y) and collide(y, x)
