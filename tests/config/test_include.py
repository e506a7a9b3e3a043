"""`include`: relative to the including file, merged into the current map, cycles and depth bounded."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance import limits
from appliance.config.parser import parse_file, parse_text, to_plain
from appliance.errors import ConfigError


class FakeFiles:
    """An in-memory file system for the parser's one swappable reader."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.reads: list[str] = []

    def __call__(self, path: str) -> str:
        self.reads.append(path)
        if path not in self.files:
            raise ConfigError([f"{path}: error opening config file: no such file"])
        return self.files[path]


def plain(files: FakeFiles, path: str) -> dict[str, object]:
    parsed = parse_file(path, read_file=files, env={})
    return {key: to_plain(entry.value) for key, entry in parsed.items()}


def test_include_merges_keys_at_top_level_relative_to_the_including_file() -> None:
    files = FakeFiles({"etc/main.conf": "port: 1\ninclude ./inc/extra.conf\n", "etc/inc/extra.conf": "max_payload = 512KB\n"})
    assert plain(files, "etc/main.conf") == {"port": 1, "max_payload": 512 * 1024}
    assert files.reads == ["etc/main.conf", "etc/inc/extra.conf"]


def test_include_inside_a_block_merges_into_that_block() -> None:
    files = FakeFiles({
        "main.conf": "authorization {\n  include 'users.conf'\n  timeout: 2\n}\n",
        "users.conf": "users = [ {user: a, password: b} ]\n",
    })
    assert plain(files, "main.conf") == {"authorization": {"users": [{"user": "a", "password": "b"}], "timeout": 2}}


def test_nested_includes_resolve_relative_to_each_file() -> None:
    files = FakeFiles({"a/main.conf": "include b/one.conf", "a/b/one.conf": "include c/two.conf", "a/b/c/two.conf": "x: 1"})
    assert plain(files, "a/main.conf") == {"x": 1}


def test_values_from_an_included_file_keep_its_name_in_their_positions() -> None:
    files = FakeFiles({"main.conf": "include inc.conf\n", "inc.conf": "\n  port: 4\n"})
    entry = parse_file("main.conf", read_file=files, env={})["port"]
    assert str(entry.key_position) == "inc.conf:2:3"


def test_an_include_cycle_is_an_error() -> None:
    files = FakeFiles({"a.conf": "include b.conf", "b.conf": "include a.conf"})
    with pytest.raises(ConfigError) as caught:
        parse_file("a.conf", read_file=files, env={})
    assert "include cycle" in caught.value.problems[0]
    assert "a.conf" in caught.value.problems[0]


def test_a_file_including_itself_is_a_cycle() -> None:
    files = FakeFiles({"a.conf": "x: 1\ninclude a.conf"})
    with pytest.raises(ConfigError, match="include cycle"):
        parse_file("a.conf", read_file=files, env={})


def test_include_depth_is_bounded() -> None:
    depth = limits.CONFIG_INCLUDE_DEPTH_MAX + 2
    files = FakeFiles({f"f{i}.conf": f"include f{i + 1}.conf" for i in range(depth)} | {f"f{depth}.conf": "x: 1"})
    with pytest.raises(ConfigError, match="nested deeper"):
        parse_file("f0.conf", read_file=files, env={})


def test_a_missing_include_is_reported_at_the_include_line() -> None:
    files = FakeFiles({"main.conf": "port: 1\ninclude nope.conf\n"})
    with pytest.raises(ConfigError) as caught:
        parse_file("main.conf", read_file=files, env={})
    assert caught.value.problems[0].startswith("main.conf:2:")
    assert "nope.conf" in caught.value.problems[0]


def test_included_files_do_not_see_the_includers_variables() -> None:
    files = FakeFiles({"main.conf": "P: 1\ninclude inc.conf", "inc.conf": "port: $P"})
    with pytest.raises(ConfigError, match="variable reference for 'P'"):
        parse_file("main.conf", read_file=files, env={})


def test_a_syntax_error_in_an_include_names_the_included_file() -> None:
    files = FakeFiles({"main.conf": "include inc.conf", "inc.conf": 'a: "\\q"'})
    with pytest.raises(ConfigError) as caught:
        parse_file("main.conf", read_file=files, env={})
    assert "inc.conf:1:" in caught.value.problems[0]


def test_the_default_reader_reads_real_files_and_bounds_their_size(tmp_path: Path) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "extra.conf").write_text("max_payload = 512KB\n")
    main = tmp_path / "main.conf"
    main.write_text("include ./inc/extra.conf\n")
    assert to_plain(parse_file(str(main), env={})["max_payload"].value) == 524288
    big = tmp_path / "big.conf"
    big.write_bytes(b"#" * (limits.CONFIG_FILE_BYTES_MAX + 1))
    with pytest.raises(ConfigError, match="larger than"):
        parse_file(str(big), env={})
    with pytest.raises(ConfigError, match="error opening config file"):
        parse_file(str(tmp_path / "missing.conf"), env={})


def test_text_without_a_file_name_includes_relative_to_the_working_directory() -> None:
    files = FakeFiles({"x.conf": "a: 1"})
    parsed = parse_text("include x.conf", filename="", read_file=files, env={})
    assert to_plain(parsed["a"].value) == 1
