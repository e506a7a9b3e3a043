"""nats-server's checkStreamCfg: a stream config's defaults and checks, in its order and with its
texts (stream.go). Each step is one function of `STEPS`, run in turn on a `Checking`; a step that
finds a problem raises JsApiError. `others` looks up the account's existing streams by name, for
the mirror's direct-get inheritance and the cycle check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from appliance.jetstream import errors
from appliance.jetstream.republish import parse_republish
from appliance.jetstream.sources import check_source, source_key
from appliance.jetstream.subjects import is_valid_name, is_valid_subject, subject_is_subset, subjects_overlap
from appliance.jetstream.transform import compile_transform

if TYPE_CHECKING:
    from appliance.jetstream.config import StreamConfig

NS = 1_000_000_000
MIN_WINDOW_NS = 100_000_000
DEFAULT_DUPLICATE_WINDOW_NS = 120 * NS
NAME_LENGTH_MAX = 255
DESCRIPTION_BYTES_MAX = 4096
METADATA_BYTES_MAX = 128 * 1024
MAX_REPLICAS = 5
API_NAMESPACES = ("$JS.>", "$JSC.>", "$NRG.>")

Lookup = Callable[[str], "StreamConfig | None"]


def bad(text: str) -> errors.JsApiError:
    return errors.STREAM_INVALID_CONFIG.format(err=text)


def pedantic_error(text: str) -> errors.JsApiError:
    return errors.PEDANTIC.format(err=text)


@dataclass(slots=True)
class Checking:
    config: StreamConfig
    pedantic: bool = False
    others: Lookup = field(default=lambda name: None)


def check_name(c: Checking) -> None:
    config = c.config
    if not is_valid_name(config.name):
        raise bad("stream name is required and can not contain '.', '*', '>', '\\', '/'")
    if len(config.name) > NAME_LENGTH_MAX:
        raise bad(f"stream name is too long, maximum allowed is {NAME_LENGTH_MAX}")
    if len(config.description.encode()) > DESCRIPTION_BYTES_MAX:
        raise bad(f"stream description is too long, maximum allowed is {DESCRIPTION_BYTES_MAX}")
    size = sum(len(k.encode()) + len(v.encode()) for k, v in config.metadata.items())
    if size > METADATA_BYTES_MAX:
        raise bad(f"stream metadata exceeds maximum size of {METADATA_BYTES_MAX} bytes")


def check_replicas(c: Checking) -> None:
    config = c.config
    if config.num_replicas == 0:
        config.num_replicas = 1
    if config.num_replicas > MAX_REPLICAS:
        raise bad(f"maximum replicas is {MAX_REPLICAS}")
    if config.num_replicas < 0:
        raise errors.REPLICAS_COUNT_CANNOT_BE_NEGATIVE.error()


def check_limits(c: Checking) -> None:
    """0 and anything below -1 mean unlimited (-1); pedantic mode refuses below -1."""
    for key in ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers"):
        value = getattr(c.config, key)
        if value == 0 or value < -1:
            if c.pedantic and value < -1:
                raise pedantic_error(f"{key} must be set to -1")
            setattr(c.config, key, -1)


def check_windows(c: Checking) -> None:
    config = c.config
    if config.max_age < 0:
        raise bad("max age can not be negative")
    if config.max_age and config.max_age < MIN_WINDOW_NS:
        raise bad("max age needs to be >= 100ms")
    if config.duplicate_window == 0 and config.mirror is None and not config.sources:
        if config.max_age and config.max_age < DEFAULT_DUPLICATE_WINDOW_NS:
            if c.pedantic:
                raise pedantic_error("duplicate window cannot be bigger than max age")
            config.duplicate_window = config.max_age
        else:
            config.duplicate_window = DEFAULT_DUPLICATE_WINDOW_NS
    if config.duplicate_window < 0:
        raise bad("duplicates window can not be negative")
    if config.max_age and config.duplicate_window > config.max_age:
        raise bad("duplicates window can not be larger then max age")
    if 0 < config.duplicate_window < MIN_WINDOW_NS:
        raise bad("duplicates window needs to be >= 100ms")


def check_permissions(c: Checking) -> None:
    config = c.config
    if config.deny_purge and config.allow_rollup_hdrs:
        raise bad("roll-ups require the purge permission")
    if config.discard_new_per_subject:
        if config.discard != "new":
            raise bad("discard new per subject requires discard new policy to be set")
        if config.max_msgs_per_subject <= 0:
            raise bad("discard new per subject requires max msgs per subject > 0")
    if config.subject_delete_marker_ttl < 0:
        raise bad("subject delete marker TTL must not be negative")
    if 0 < config.subject_delete_marker_ttl < NS:
        raise bad("subject delete marker TTL must be at least 1 second")


def check_mirror(c: Checking) -> None:
    config = c.config
    mirror = config.mirror
    if mirror is None:
        return
    if config.first_seq:
        raise errors.MIRROR_WITH_FIRST_SEQ.error()
    if config.subjects:
        raise errors.MIRROR_WITH_SUBJECTS.error()
    if config.sources:
        raise errors.MIRROR_WITH_SOURCES.error()
    check_source(mirror, mirror=True)
    origin = c.others(str(mirror.get("name") or ""))
    if origin is not None:
        if 0 < config.max_msg_size < origin.max_msg_size:
            raise errors.MIRROR_MAX_MESSAGE_SIZE_TOO_BIG.error()
        config.mirror_direct = origin.allow_direct  # a mirror serves direct gets as its origin does


def check_sources(c: Checking) -> None:
    seen: set[tuple[str, str]] = set()
    for source in c.config.sources:
        if not isinstance(source, dict) or not is_valid_name(str(source.get("name") or "")):
            raise errors.SOURCED_STREAM_NAME_INVALID.error()
        key = (str(source["name"]), source_key(source))
        if key in seen:
            raise errors.SOURCE_DUPLICATE_DETECTED.error()
        seen.add(key)
        check_source(source, mirror=False)
        origin = c.others(str(source["name"]))
        if origin is not None and 0 < c.config.max_msg_size < origin.max_msg_size:
            raise errors.SOURCE_MAX_MESSAGE_SIZE_TOO_BIG.error()


def check_cycle(c: Checking) -> None:
    """A stream may not, through its sources and mirrors, copy what it copies (nats-server walks
    the graph from the new config)."""
    to_visit: list[StreamConfig] = [c.config]
    visited: set[str] = set()
    while to_visit:
        config = to_visit.pop(0)
        visited.add(config.name)
        for source in config.sources:
            name = str(source.get("name") or "")
            if name in visited:
                filter_subject = str(source.get("filter_subject") or "")
                if not filter_subject or any(subjects_overlap(s, filter_subject) for s in config.subjects):
                    raise bad("detected cycle")
            else:
                found = c.others(name)
                if found is not None:
                    to_visit.append(found)
        mirror = config.mirror
        if mirror is not None:
            name = str(mirror.get("name") or "")
            if name in visited:
                raise bad("detected cycle")
            found = c.others(name)
            if found is not None:
                to_visit.append(found)


def check_subjects(c: Checking) -> None:
    config = c.config
    if not config.subjects:
        if config.mirror is None and not config.sources:
            config.subjects = [config.name]
        return
    if config.mirror is not None:
        raise errors.MIRROR_WITH_SUBJECTS.error()
    seen: set[str] = set()
    subjects = config.subjects
    for index, subject in enumerate(subjects):
        if not is_valid_subject(subject):
            raise bad("invalid subject")
        if subject in seen:
            raise bad("duplicate subjects detected")
        if subject == ">":
            if not config.no_ack:
                raise bad("capturing all subjects requires no-ack to be true")
            if config.num_replicas != 1:
                raise bad("capturing all subjects requires replicas of 1")
        if not config.no_ack:
            for namespace in API_NAMESPACES:
                if subjects_overlap(subject, namespace) and not subject_is_subset(subject, "$JS.EVENT.>"):
                    raise bad("subjects that overlap with jetstream api require no-ack to be true")
            if subjects_overlap(subject, "$SYS.>") and not subject_is_subset(subject, "$SYS.ACCOUNT.>"):
                raise bad("subjects that overlap with system api require no-ack to be true")
        for other in subjects[index + 1 :]:
            if subjects_overlap(other, subject):
                raise bad(f'subject "{subject}" overlaps with "{other}"')
        seen.add(subject)


def check_transform(c: Checking) -> None:
    transform = c.config.subject_transform
    if transform is not None:
        compile_transform(transform["src"], transform["dest"], of="stream")


def check_republish(c: Checking) -> None:
    """After the subjects (defaulted) and the subject transform, as nats-server (republish.py)."""
    config = c.config
    if config.republish is not None:
        config.republish = parse_republish(
            config.republish, subjects=config.subjects, subject_transform=config.subject_transform
        )


def check_placement(c: Checking) -> None:
    placement = c.config.placement
    if placement is None:
        return
    if placement.get("tags") is None and not placement.get("cluster") and not placement.get("preferred"):
        c.config.placement = None  # an empty placement is none (an empty tags list is not empty)
        return
    if placement.get("preferred"):
        raise bad("preferred server not permitted in placement")
    c.config.placement = {k: v for k, v in placement.items() if v}  # echoed with omitempty


STEPS: list[Callable[[Checking], None]] = [
    check_name,
    check_replicas,
    check_limits,
    check_windows,
    check_permissions,
    check_mirror,
    check_sources,
    check_cycle,
    check_subjects,
    check_transform,
    check_republish,
    check_placement,
]


def check_stream_config(
    config: StreamConfig, *, pedantic: bool = False, others: Lookup | None = None
) -> None:
    checking = Checking(config, pedantic, others or (lambda name: None))
    for step in STEPS:
        step(checking)
