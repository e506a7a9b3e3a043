"""The streams of an account as the JetStream API sees them: those held here or, clustered, every
stream the meta state assigns anywhere (counted by limits, listed by STREAM.NAMES/LIST)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.jetstream.config import StreamConfig, stream_config_from_record

if TYPE_CHECKING:
    from appliance.jetstream.service import AccountJetStream


def catalog(ajs: AccountJetStream) -> dict[str, StreamConfig]:
    """Every stream of the account by name: those held here, or, clustered, every stream the
    meta state assigns anywhere."""
    if not ajs.service.meta.clustered:
        return {name: stream.config for name, stream in ajs.streams.items()}
    records = ajs.service.meta.state.accounts.get(ajs.account.name, {})
    out: dict[str, StreamConfig] = {}
    for name, record in records.items():
        local = ajs.streams.get(name)
        config = record["config"]
        if local is not None:
            out[name] = local.config
        elif isinstance(config, dict):
            out[name] = stream_config_from_record(config)
    return out
