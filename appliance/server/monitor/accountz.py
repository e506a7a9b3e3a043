"""`/accountz`: the accounts of this server; `?acc=NAME` gives one account's detail.

The detail carries what this server has of nats-server's AccountInfo: name, JetStream, client
connections and subscriptions counted over every worker, the sublist statistics summed as /subsz sums
them, and the account's exports and imports as nats-server's ExtExport / ExtImport (services before
streams among the exports, streams before services among the imports, each in config order; empty
lists left out as nats-server leaves them out). nats-server's own system-service imports
(`$SYS.REQ.ACCOUNT.<acc>.CONNZ`...) and the pending `responses` map are not listed (not built here).
"""

from __future__ import annotations

from appliance.config.imports import Export, Import
from appliance.config.jwt import AccountClaims, JWTError, account_claims

from appliance.durations import rfc3339_nano, wall_ns
from .endpoint import PART_SUBLISTS, Endpoint, RequestContext, Response, json_response, text_response
from .gojson import JsonValue
from .params import Query
from .subsz import summed
from .view import AccountInfo, ServerView


def detail_json(view: ServerView, account: AccountInfo) -> dict[str, JsonValue]:
    stats = summed(view.sublist_stats(account.name))
    out: dict[str, JsonValue] = {
        "account_name": account.name,
        "update_time": rfc3339_nano(wall_ns(view.config_load_wall_s)),
    }
    if account.is_system:
        out["is_system"] = True
    out.update({
        "expired": False,
        "complete": True,
        "jetstream_enabled": account.jetstream_enabled,
        "leafnode_connections": 0,
        "client_connections": account.client_connections,
        "subscriptions": stats["num_subscriptions"],
    })
    exports = [_export_json(e) for e in account.exports if e.service] + \
        [_export_json(e) for e in account.exports if not e.service]
    if exports:
        out["exports"] = exports
    imports = [_import_json(i) for i in account.imports if not i.service] + \
        [_import_json(i) for i in account.imports if i.service]
    if imports:
        out["imports"] = imports
    claims = _claims(account.jwt)
    if claims is not None:  # operator mode: the account's JWT, who signed it, its revoked users
        out["jwt"] = account.jwt
        out["issuer_key"] = claims.issuer
    out["name_tag"] = claims.name if claims is not None and claims.name else account.name
    if claims is not None and claims.revocations:
        out["revoked_user"] = {key: rfc3339_nano(at * 1_000_000_000) for key, at in claims.revocations.items()}
    out["sublist_stats"] = stats
    return out


def _export_json(export: Export) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {"subject": export.subject, "type": "service" if export.service else "stream"}
    if export.service:
        out["response_type"] = export.response_type
    if export.account_token_position:
        out["account_token_position"] = export.account_token_position
    if export.allow_trace:
        out["allow_trace"] = True
    if export.accounts:
        out["approved_accounts"] = list(export.accounts)
    return out


def _import_json(im: Import) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {"subject": im.subject, "account": im.account}
    if im.service:
        out["to"] = im.local
    out["local_subject"] = im.local
    out["type"] = "service" if im.service else "stream"
    if im.allow_trace:
        out["allow_trace"] = True
    out.update({"invalid": False, "share": im.share, "tracking": False})
    return out


def _claims(token: str) -> AccountClaims | None:
    if not token:
        return None
    try:
        return account_claims(token)
    except JWTError:
        return None


def handle(ctx: RequestContext) -> Response:
    ctx.count()
    view = ctx.view
    out: dict[str, JsonValue] = {
        "server_id": view.server_id,
        "now": rfc3339_nano(wall_ns(view.now_wall_s())),
        "system_account": view.system_account,
    }
    wanted = ctx.query.get("acc")
    accounts = view.accounts()
    if not wanted:
        out["accounts"] = sorted(account.name for account in accounts)
        return json_response(out)
    found = [account for account in accounts if account.name == wanted]
    if not found:
        return text_response(400, f"Account {wanted} does not exist")
    out["account_detail"] = detail_json(view, found[0])
    return json_response(out)


def needs(query: Query) -> frozenset[str]:
    return frozenset({PART_SUBLISTS})  # per-account subscriptions and client counts of every worker


ENDPOINT = Endpoint(paths=("/accountz",), handle=handle, title="Accounts", needs=needs)
