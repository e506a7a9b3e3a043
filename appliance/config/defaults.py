"""The embedded default of DESIGN.md §1: `appliance run` with no config file.

A single-node JetStream server on 127.0.0.1:4222 whose store is under the user's data
directory (`$XDG_DATA_HOME/appliance`, else `~/.local/share/appliance`). Flags still apply on top
(`resolve_run_options(args, defaults=embedded_default_options(...))`). Pure: the environment is
passed in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from appliance.config.options import ServerOptions

APP_DIR_NAME = "appliance"


def user_data_dir(env: Mapping[str, str]) -> str:
    """`$XDG_DATA_HOME/appliance`, else `$HOME/.local/share/appliance` (XDG base directory spec)."""
    base = env.get("XDG_DATA_HOME", "")
    if not base or not os.path.isabs(base):  # the spec says relative values are ignored
        base = os.path.join(env.get("HOME", "/"), ".local", "share")
    return os.path.join(base, APP_DIR_NAME)


def embedded_default_options(*, data_dir: str) -> ServerOptions:
    options = ServerOptions(host="127.0.0.1", port=4222)
    options.jetstream.enabled = True
    options.jetstream.store_dir = data_dir  # the server appends "/jetstream", as nats-server does
    return options
