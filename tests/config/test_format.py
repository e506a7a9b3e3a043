"""format.dumps: data -> NATS config text that parses back to the same data (the writer's contract)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from appliance.config import options_from_text
from appliance.config.format import dumps, quote


def test_quote_escapes_what_the_lexer_unescapes() -> None:
    assert quote('a"b\\c\td\ne\rf\x01é') == '"a\\"b\\\\c\\td\\ne\\rf\\x01é"'


def test_a_cluster_config_written_by_dumps_loads_as_options() -> None:
    text = dumps({
        "server_name": "n1",
        "listen": "127.0.0.1:4222",
        "jetstream": {"store_dir": "/tmp/n1", "max_file_store": 1024},
        "cluster": {"name": "C1", "listen": "127.0.0.1:6222", "routes": ["nats://127.0.0.1:6223"]},
        "server_tags": ["az:1"],
        "debug": True,
    })
    options = options_from_text(text, filename="w.conf", env={})
    assert (options.server_name, options.port, options.cluster.routes) == ("n1", 4222, ["nats://127.0.0.1:6223"])
    assert (options.jetstream.max_storage, options.server_tags, options.debug) == (1024, ["az:1"], True)


def test_datetimes_are_written_in_zulu_form() -> None:
    assert dumps({"t": datetime(2021, 2, 5, 12, 7, 34, tzinfo=timezone.utc)}) == "t: 2021-02-05T12:07:34Z\n"


@pytest.mark.parametrize("key", ["include", "a b", "", "x=y", '"q"'])
def test_keys_that_cannot_be_bare_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match="cannot be written"):
        dumps({key: 1})


def test_values_without_a_config_form_are_refused() -> None:
    with pytest.raises(ValueError, match="no plain decimal form"):
        dumps({"f": 1e-9})
    with pytest.raises(TypeError, match="cannot write"):
        dumps({"s": {1, 2}})
