"""ports_file_dir's file: nats-server's name and JSON."""

from __future__ import annotations

import json
from pathlib import Path

from appliance.supervisor.ports_file import executable_name, ports_file_path, ports_json


def test_name_is_executable_underscore_pid() -> None:
    assert ports_file_path("/run/x", pid=42, argv0="/usr/local/bin/appliance") == Path("/run/x/appliance_42.ports")
    assert executable_name("/src/appliance/__main__.py") == "appliance"  # python -m appliance


def test_a_bound_host_is_listed_as_is_and_the_any_address_as_every_host_address() -> None:
    bound = json.loads(ports_json(client_host="127.0.0.1", client_port=4222, http_host="127.0.0.1", http_port=8222,
                                  addresses=["10.0.0.5"]))
    assert bound == {"nats": ["nats://127.0.0.1:4222"], "monitoring": ["http://127.0.0.1:8222"]}
    anywhere = json.loads(ports_json(client_host="0.0.0.0", client_port=4222, http_host="0.0.0.0", http_port=None,
                                     addresses=["10.0.0.5", "fd00::5"]))
    assert anywhere == {"nats": ["nats://10.0.0.5:4222", "nats://[fd00::5]:4222"]}
    unknown = json.loads(ports_json(client_host="0.0.0.0", client_port=4222, http_host="", http_port=None,
                                    addresses=[]))
    assert unknown == {"nats": ["nats://0.0.0.0:4222"]}  # addresses not listable (no AF_NETLINK in the sandbox)
