"""Permission templates of scoped signing keys, as nats-server's processUserPermissionsTemplate
(auth.go): in the template's subjects, `{{name()}}` and `{{subject()}}` become the user JWT's name
and key, `{{account-name()}}` and `{{account-subject()}}` the account's, `{{tag(x)}}` and
`{{account-tag(x)}}` every value of the user's (account's) tags `x:value` (one subject per
combination, at most EXPANSIONS_MAX).

Pure. A generated subject that is not valid is left out of allow lists and refuses the user when
in a deny list; an allow list that templates emptied denies everything (`deny >`).
"""

from __future__ import annotations

import itertools
import re

from appliance.config.jwt import AccountClaims, UserClaims
from appliance.config.options import Permissions, SubjectPermission
from appliance.protocol.subjects import is_valid_subject

MUSTACHE = re.compile(r"\{\{([^}]+)\}\}")
EXPANSIONS_MAX = 4096  # maxPermTemplateSubjectExpansions


class TemplateError(ValueError):
    pass


def _values(operation: str, user: UserClaims, account: AccountClaims, *, deny: bool, subject: str) -> list[str]:
    op = operation.strip()
    lowered = op.lower()
    simple = {"name()": user.name, "subject()": user.subject, "account-name()": account.name,
              "account-subject()": user.issuer_account}
    if lowered in simple:
        return [simple[lowered]]
    for prefix, tags in (("tag(", user.tags), ("account-tag(", account.tags)):
        if lowered.startswith(prefix) and op.endswith(")"):
            wanted = op[len(prefix):-1].lower() + ":"
            found = [tag[len(wanted):] for tag in tags if tag.startswith(wanted)]
            if found:
                return found
            if deny:
                raise TemplateError(f'generated invalid subject "{subject}": "{op[len(prefix):-1]}" is not defined')
            return [" "]  # makes the subject invalid: left out
    raise TemplateError(f'template operation in "{subject}": "{op}" is not defined')


def _expand(subjects: list[str], user: UserClaims, account: AccountClaims, *, deny: bool) -> list[str]:
    if not any(MUSTACHE.search(subject) for subject in subjects):
        return subjects
    out: list[str] = []
    for subject in subjects:
        marks = MUSTACHE.findall(subject)
        choices = [_values(mark, user, account, deny=deny, subject=subject) for mark in marks]
        count = 1
        for choice in choices:
            count *= len(choice)
        if len(out) + count > EXPANSIONS_MAX:
            raise TemplateError(f"permission template expansion limit exceeded: {EXPANSIONS_MAX}")
        for combination in itertools.product(*choices):
            made = subject
            for mark, value in zip(marks, combination, strict=True):
                made = made.replace("{{" + mark + "}}", value)
            if is_valid_subject(made.encode()):
                out.append(made)
            elif deny:
                raise TemplateError("generated invalid subject")
    return out


def _side(permission: SubjectPermission | None, user: UserClaims, account: AccountClaims) -> SubjectPermission | None:
    if permission is None:
        return None
    allow = _expand(permission.allow, user, account, deny=False) if permission.allow is not None else None
    deny = _expand(permission.deny, user, account, deny=True)
    if permission.allow and not allow:  # a non-empty allow list templates emptied: nothing is allowed
        deny = [*deny, ">"] if ">" not in deny else deny
        allow = None
    return SubjectPermission(allow=allow, deny=deny)


def apply_template(permissions: Permissions | None, user: UserClaims, account: AccountClaims) -> Permissions | None:
    """The template's permissions for this user; TemplateError when they cannot be generated."""
    if permissions is None:
        return None
    return Permissions(publish=_side(permissions.publish, user, account),
                       subscribe=_side(permissions.subscribe, user, account),
                       allow_responses=permissions.allow_responses)
