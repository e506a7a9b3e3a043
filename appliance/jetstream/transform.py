"""Subject transforms of sources and mirrors (`subject_transforms: [{src, dest}]`) and of a
stream (`subject_transform: {src, dest}`), pure.

A transform matches subjects by `src` (wildcards allowed) and rewrites them to `dest`, whose
tokens are literals, `$N` or `{{wildcard(N)}}` (the N-th wildcard token of src, from 1), or a
trailing `>` standing for what src's `>` matched. Errors carry nats-server's codes and texts
(sources: 10145 for a bad src, 10146 for a bad dest; a stream's: 10155, 10156). Other mapping
functions ({{partition()}},
{{split()}}, ...) are refused with 10052.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.jetstream import errors
from appliance.jetstream.subjects import is_valid_subject, subject_matches

if TYPE_CHECKING:
    from appliance.jetstream.config import StreamConfig

FUNCTION = re.compile(r"\{\{\s*([A-Za-z]+)\s*\((.*?)\)\s*\}\}")
LEGACY = re.compile(r"\$(\d+)")


@dataclass(frozen=True, slots=True)
class Transform:
    src: str
    dest: str
    parts: tuple[tuple[str, int], ...]  # ("lit", 0) with text in literals, ("wc", n) or (">", 0)
    literals: tuple[str, ...]
    wildcard_positions: tuple[int, ...]  # token indexes of src's `*`s

    def apply(self, subject: str) -> str | None:
        if not subject_matches(self.src, subject):
            return None
        tokens = subject.split(".")
        out: list[str] = []
        for (kind, value), literal in zip(self.parts, self.literals, strict=True):
            if kind == "lit":
                out.append(literal)
            elif kind == "wc":
                out.append(tokens[self.wildcard_positions[value - 1]])
            else:
                out.append(".".join(tokens[len(self.src.split(".")) - 1 :]))
        return ".".join(out)


ERRORS = {
    "source": (errors.SOURCE_INVALID_SUBJECT_FILTER, errors.SOURCE_INVALID_TRANSFORM_DESTINATION),
    "stream": (errors.STREAM_TRANSFORM_INVALID_SOURCE, errors.STREAM_TRANSFORM_INVALID_DESTINATION),
}


def compile_transform(src: str, dest: str, *, of: str = "source") -> Transform:
    """A transform of a source/mirror (of="source") or of a stream (of="stream")."""
    bad_src, bad_dest = ERRORS[of]

    def _dest_error(text: str) -> errors.JsApiError:
        return bad_dest.format(err=text)

    source = src or ">"
    if not is_valid_subject(source):
        raise bad_src.format(err=f"invalid subject {src}")
    src_tokens = source.split(".")
    wildcards = tuple(i for i, token in enumerate(src_tokens) if token == "*")
    target = dest or source
    parts: list[tuple[str, int]] = []
    literals: list[str] = []
    dest_tokens = target.split(".")
    for index, token in enumerate(dest_tokens):
        function = FUNCTION.fullmatch(token)
        legacy = LEGACY.fullmatch(token)
        if function is not None:
            name, args = function.group(1).lower(), function.group(2).strip()
            if name != "wildcard":
                raise errors.STREAM_INVALID_CONFIG.format(
                    err=f"subject transform function {function.group(1)} is not supported by this server"
                )
            if not args.isdigit():
                raise _dest_error("invalid subject")
            number = int(args)
            if not 1 <= number <= len(wildcards):
                raise _dest_error(
                    f"invalid mapping destination: wildcard index out of range in {token}: [{number}]"
                )
            parts.append(("wc", number))
            literals.append("")
        elif legacy is not None:
            number = int(legacy.group(1))
            if not 1 <= number <= len(wildcards):
                raise _dest_error(
                    f"invalid mapping destination: wildcard index out of range in {token}: [{number}]"
                )
            parts.append(("wc", number))
            literals.append("")
        elif token == ">":
            if index != len(dest_tokens) - 1 or src_tokens[-1] != ">":
                raise _dest_error("invalid subject")
            parts.append((">", 0))
            literals.append("")
        elif token == "*" or not token or "{" in token or "}" in token:
            raise _dest_error("invalid subject")
        else:
            parts.append(("lit", 0))
            literals.append(token)
    return Transform(source, target, tuple(parts), tuple(literals), wildcards)


def compile_all(entries: object) -> list[Transform]:
    """A source's `subject_transforms` (already echo-checked JSON) compiled in order."""
    out: list[Transform] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            raise errors.INVALID_JSON.format(err="json: cannot unmarshal into SubjectTransformConfig")
        out.append(compile_transform(str(entry.get("src") or ""), str(entry.get("dest") or "")))
    return out


def first_match(transforms: list[Transform], subject: str) -> str | None:
    """The subject the first matching transform gives; None when none matches (not copied)."""
    for transform in transforms:
        result = transform.apply(subject)
        if result is not None:
            return result
    return None


Handler = Callable[[bytes, "bytes | None", "bytes | None", bytes], None]


def transformed(config: StreamConfig, on_msg: Handler) -> Handler:
    """on_msg itself, or, for a stream with a subject_transform, on_msg given the stored subject
    (a subject the transform does not match is stored as it is)."""
    if not config.subject_transform:
        return on_msg
    spec = config.subject_transform
    transform = compile_transform(spec["src"], spec["dest"], of="stream")

    def on_transformed(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        renamed = transform.apply(subject.decode())
        on_msg(renamed.encode() if renamed is not None else subject, reply, header, data)

    return on_transformed
