"""Subject transforms of sources and mirrors (`subject_transforms: [{src, dest}]`) and of a
stream (`subject_transform: {src, dest}`), pure.

A transform matches subjects by `src` (wildcards allowed) and rewrites them to `dest`. Each dest
token is a literal, `$N`, a trailing `>` (what src's `>` matched), or one mapping function in
mustaches, as nats-server 2.15.1 accepts them:

  {{wildcard(N)}}            the N-th `*` token of src (N from 1; `$N` is the same)
  {{partition(P, N...)}}     fnv32a of the named wildcard tokens (concatenated; the whole
                             subject when none are named, or src has no `*`) modulo P
  {{split(N, delim)}}        the token split at every `delim` (empty pieces dropped)
  {{splitfromleft(N, k)}}    the token split in two k bytes from the left (fromright: right)
  {{slicefromleft(N, k)}}    the token cut into k-byte slices from the left (fromright: right)
  {{left(N, k)}}             the k leftmost bytes of the token ({{right(N, k)}}: rightmost)
  {{random(P)}}              a random number below P (from an injected RNG)

Function names match as nats-server's regular expressions do: the first letter of each word
may be upper case (`Partition`, `SplitFromLeft`), nothing else. Theory of operation: `compile_transform`
runs nats-server's checks in its order (ValidateMapping's token checks, then the subject shape,
then each function's arguments) so the first error reported is the same one; `Transform.apply`
then works on the subject's UTF-8 bytes, because nats-server slices bytes, not characters.
Errors carry nats-server's codes and texts: 10145/10146 for a source, 10151/10154 for a mirror,
10155/10156 for a stream.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from appliance.jetstream import errors
from appliance.jetstream.subjects import is_valid_subject

if TYPE_CHECKING:
    from appliance.jetstream.config import StreamConfig

Kind = Literal[
    "literal", "wildcard", "partition", "split", "splitfromleft", "splitfromright",
    "slicefromleft", "slicefromright", "left", "right", "random",
]
Of = Literal["source", "mirror", "stream"]

_WS = r"[\t\n\f\r ]*"  # Go's \s


def _function(name: str) -> re.Pattern[str]:
    words = re.findall(r"[A-Z][a-z]*", name)
    body = "".join(f"[{w[0].lower()}{w[0]}]{w[1:]}" for w in words)
    return re.compile(r"\{\{" + _WS + body + _WS + r"\((.*)\)" + _WS + r"\}\}")


# nats-server tries them in this order; the first whose expression is found in the token wins.
FUNCTIONS: tuple[tuple[Kind, re.Pattern[str]], ...] = (
    ("wildcard", _function("Wildcard")),
    ("partition", _function("Partition")),
    ("splitfromleft", _function("SplitFromLeft")),
    ("splitfromright", _function("SplitFromRight")),
    ("slicefromleft", _function("SliceFromLeft")),
    ("slicefromright", _function("SliceFromRight")),
    ("right", _function("Right")),
    ("left", _function("Left")),
    ("split", _function("Split")),
    ("random", _function("Random")),
)
ARG_SEPARATOR = re.compile(r",[\t\n\f\r ]*")
GO_INT = re.compile(r"[+-]?[0-9]+")
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
FNV32_OFFSET = 0x811C9DC5
FNV32_PRIME = 0x01000193

BAD_DEST = "invalid mapping destination"
INVALID_TRANSFORM = f"{BAD_DEST}: invalid transform"
UNKNOWN_FUNCTION = f"{BAD_DEST}: unknown function"
INDEX_OUT_OF_RANGE = f"{BAD_DEST}: wildcard index out of range"
NOT_ENOUGH_ARGS = f"{BAD_DEST}: not enough arguments passed to the function"
INVALID_ARG = f"{BAD_DEST}: function argument is invalid or in the wrong format"
TOO_MANY_ARGS = f"{BAD_DEST}: too many arguments passed to the function"


class MappingError(ValueError):
    """A bad destination, with nats-server's text (`<reason> in <token>`)."""

    def __init__(self, reason: str, token: str = "") -> None:
        super().__init__(f"{reason} in {token}" if token else reason)


@dataclass(frozen=True, slots=True)
class Step:
    """One destination token: a literal, or a function of source tokens."""

    kind: Kind
    text: bytes = b""  # the literal
    args: tuple[int, ...] = ()  # wildcard numbers (from 1) as written
    number: int = 0  # partitions, position, slice size, or random ceiling (int32 as nats-server)
    delimiter: bytes = b""


def fnv32a(data: bytes) -> int:
    """FNV-1a, 32 bits (Go's hash/fnv New32a): the partition hash of nats-server."""
    value = FNV32_OFFSET
    for byte in data:
        value = ((value ^ byte) * FNV32_PRIME) & 0xFFFFFFFF
    return value


def _go_int(text: str, *, bits: int = 64) -> int | None:
    """Go's strconv.Atoi / ParseInt(text, 10, bits): an optional sign and decimal digits, in range."""
    if GO_INT.fullmatch(text) is None:
        return None
    value = int(text)
    bound = 2 ** (bits - 1)
    return value if -bound <= value < bound else None


def _int32(value: int) -> int:
    return ((value + 2**31) % 2**32) - 2**31


def _index_and_int(token: str, args: list[str], kind: Kind) -> Step:
    if len(args) < 2:
        raise MappingError(NOT_ENOUGH_ARGS, token)
    if len(args) > 2:
        raise MappingError(TOO_MANY_ARGS, token)
    index = _go_int(args[0].strip(" "))
    number = _go_int(args[1].strip(" "), bits=32)
    if index is None or number is None:
        raise MappingError(INVALID_ARG, token)
    return Step(kind, args=(index,), number=number)


def _parse_function(token: str, kind: Kind, args: list[str]) -> Step:
    if kind == "wildcard":
        if args == [""]:
            raise MappingError(NOT_ENOUGH_ARGS, token)
        if len(args) > 1:
            raise MappingError(TOO_MANY_ARGS, token)
        index = _go_int(args[0].strip(" "))
        if index is None:
            raise MappingError(INVALID_ARG, token)
        return Step("wildcard", args=(index,))
    if kind in ("partition", "random"):
        if kind == "random" and len(args) != 1:
            raise MappingError(NOT_ENOUGH_ARGS, token)
        count = _go_int(args[0].strip(" "))
        if count is None or count > INT32_MAX:
            raise MappingError(INVALID_ARG, token)
        indexes = [_go_int(arg.strip(" ")) for arg in args[1:]]
        if any(index is None for index in indexes):
            raise MappingError(INVALID_ARG, token)
        return Step(kind, args=tuple(i for i in indexes if i is not None), number=_int32(count))
    if kind == "split":
        if len(args) < 2:
            raise MappingError(NOT_ENOUGH_ARGS, token)
        if len(args) > 2:
            raise MappingError(TOO_MANY_ARGS, token)
        index = _go_int(args[0].strip(" "))
        if index is None or " " in args[1] or "." in args[1]:
            raise MappingError(INVALID_ARG, token)
        return Step("split", args=(index,), delimiter=args[1].encode())
    return _index_and_int(token, args, kind)


def parse_token(token: str) -> Step:
    """nats-server's indexPlaceHolders: what one destination token stands for."""
    if len(token) > 1 and token[0] == "$":
        index = _go_int(token[1:])
        if index is None:  # other things rely on tokens starting with $: a literal
            return Step("literal", text=token.encode())
        return Step("wildcard", args=(index,))
    if len(token) > 4 and token.startswith("{{") and token.endswith("}}"):
        for kind, pattern in FUNCTIONS:
            found = pattern.search(token)
            if found is not None:
                return _parse_function(token, kind, ARG_SEPARATOR.split(found.group(1)))
        raise MappingError(UNKNOWN_FUNCTION, token)
    return Step("literal", text=token.encode())


def _check_tokens(dest: str) -> None:
    """nats-server's ValidateMapping loop over the destination's tokens."""
    after_full_wildcard = False
    for token in dest.split("."):
        if not token or after_full_wildcard:
            raise MappingError(INVALID_TRANSFORM, token)
        if len(token) > 4 and token.startswith("{{") and token.endswith("}}"):
            if not any(pattern.search(token) for _, pattern in FUNCTIONS):
                raise MappingError(UNKNOWN_FUNCTION, token)
            continue
        if token == ">":
            after_full_wildcard = True
        elif any(ch in token for ch in "\t\n\f\r "):
            raise MappingError(INVALID_TRANSFORM)


def _shape(subject: str) -> tuple[int, bool] | None:
    """(number of `*` tokens, ends with `>`), or None when not a subject (nats-server subjectInfo)."""
    tokens = subject.split(".")
    if any(not token for token in tokens) or ">" in tokens[:-1]:
        return None
    return tokens.count("*"), tokens[-1] == ">"


def build_steps(src: str, dest: str, *, check_tokens: bool = True) -> tuple[Step, ...]:
    """The steps of dest (nats-server's NewSubjectTransform, after ValidateMapping unless
    `check_tokens` is False, as for a stream's republish); MappingError."""
    if check_tokens:
        _check_tokens(dest)
    src_shape, dest_shape = _shape(src), _shape(dest)
    if src_shape is None or dest_shape is None or dest_shape[0] > 0 or src_shape[1] != dest_shape[1]:
        raise MappingError("invalid subject")
    wildcards, full = src_shape
    steps: list[Step] = []
    for token in dest.split("."):
        step = parse_token(token)
        if wildcards or full:
            if step.kind not in ("literal", "random"):
                for number in step.args:
                    if number > wildcards:
                        raise MappingError(INDEX_OUT_OF_RANGE, f"{token}: [{number}]")
        elif step.kind not in ("literal", "random", "partition"):
            raise MappingError(INDEX_OUT_OF_RANGE, token)
        elif step.kind == "partition":
            step = Step("partition", number=step.number)  # no wildcards: the whole subject is hashed
        steps.append(step)
    return tuple(steps)


def _match(src_tokens: tuple[bytes, ...], tokens: list[bytes]) -> bool:
    for index, part in enumerate(src_tokens):
        if part == b">":
            return len(tokens) > index
        if index >= len(tokens) or (part != b"*" and part != tokens[index]):
            return False
    return len(tokens) == len(src_tokens)


def _is_literal(tokens: list[bytes]) -> bool:
    return b"" not in tokens and b"*" not in tokens and b">" not in tokens


def _split(token: bytes, delimiter: bytes) -> list[bytes]:
    if delimiter:
        return token.split(delimiter)
    # Go splits after each UTF-8 sequence when the separator is empty
    return [ch.encode("utf-8", "surrogateescape") for ch in token.decode("utf-8", "surrogateescape")]


def _apply_split(token: bytes, delimiter: bytes) -> bytes:
    pieces = _split(token, delimiter)
    out = bytearray()
    for index, piece in enumerate(pieces):
        out += piece
        if index < len(pieces) - 1 and pieces[index + 1] and not (index == 0 and not piece):
            out += b"."
    return bytes(out)


def _slice_from_left(token: bytes, size: int) -> bytes:
    if not 0 < size < len(token):
        return token
    pieces = [token[i : i + size] for i in range(0, len(token) - size + 1, size)]
    rest = len(pieces) * size
    return b".".join(pieces + ([token[rest:]] if rest < len(token) else []))


def _slice_from_right(token: bytes, size: int) -> bytes:
    if not 0 < size < len(token):
        return token
    remainder = len(token) % size
    pieces = [token[:remainder]] if remainder else []
    pieces += [token[i : i + size] for i in range(remainder, len(token), size)]
    return b".".join(pieces)


def _split_at(token: bytes, position: int, *, from_right: bool) -> bytes:
    if not 0 < position < len(token):
        return token
    cut = len(token) - position if from_right else position
    return token[:cut] + b"." + token[cut:]


def _keep(token: bytes, size: int, *, from_right: bool) -> bytes:
    if not 0 < size < len(token):
        return token
    return token[len(token) - size :] if from_right else token[:size]


def _partition(key: bytes, buckets: int) -> bytes:
    if buckets == 0:
        return b"0"
    return str(fnv32a(key) % (buckets & 0xFFFFFFFF)).encode()


@dataclass(frozen=True, slots=True)
class Transform:
    src: str  # as matched (">" when none was given)
    dest: str  # as written (src when none was given)
    steps: tuple[Step, ...]  # empty: the subject is kept as it is
    wildcard_positions: tuple[int, ...]  # token indexes of src's `*`s
    rng: random.Random | None = None  # for {{random()}}
    src_tokens: tuple[bytes, ...] = ()  # src split once, for matching

    def __post_init__(self) -> None:
        if not self.src_tokens:
            object.__setattr__(self, "src_tokens", tuple(self.src.encode().split(b".")))

    def apply(self, subject: str) -> str | None:
        """The transformed subject, or None when src does not match it (invalid UTF-8 that a
        byte slice may leave is replaced: our subjects are text)."""
        result = self.apply_bytes(subject.encode("utf-8", "surrogateescape"))
        return None if result is None else result.decode("utf-8", "replace")

    def apply_bytes(self, subject: bytes) -> bytes | None:
        tokens = subject.split(b".")
        if not _is_literal(tokens) or not _match(self.src_tokens, tokens):
            return None
        if not self.steps:
            return subject
        out = [self._step(step, tokens, subject) for step in self.steps]
        if self.steps[-1].kind == "literal" and self.steps[-1].text == b">":
            out[-1] = b".".join(tokens[len(self.src_tokens) - 1 :])
        return b".".join(out)

    def _token(self, number: int, tokens: list[bytes]) -> bytes:
        # nats-server maps wildcard numbers to token indexes through a map: a number below 1 reads
        # the map's zero value, token 0
        position = self.wildcard_positions[number - 1] if 1 <= number <= len(self.wildcard_positions) else 0
        return tokens[position] if position < len(tokens) else b""

    def _step(self, step: Step, tokens: list[bytes], subject: bytes) -> bytes:
        kind = step.kind
        if kind == "literal":
            return step.text
        if kind == "partition":
            key = b"".join(self._token(n, tokens) for n in step.args) if step.args else subject
            return _partition(key, step.number)
        if kind == "random":
            if step.number == 0:
                return b"0"
            rng = self.rng if self.rng is not None else random.Random()
            return str(rng.getrandbits(31) % abs(step.number)).encode()
        token = self._token(step.args[0], tokens)
        if kind == "wildcard":
            return token
        if kind == "split":
            return _apply_split(token, step.delimiter)
        if kind in ("splitfromleft", "splitfromright"):
            return _split_at(token, step.number, from_right=kind == "splitfromright")
        if kind == "slicefromleft":
            return _slice_from_left(token, step.number)
        if kind == "slicefromright":
            return _slice_from_right(token, step.number)
        return _keep(token, step.number, from_right=kind == "right")


ERRORS: dict[Of, tuple[errors.ApiError, errors.ApiError]] = {
    "source": (errors.SOURCE_INVALID_SUBJECT_FILTER, errors.SOURCE_INVALID_TRANSFORM_DESTINATION),
    "mirror": (errors.MIRROR_INVALID_SUBJECT_FILTER, errors.MIRROR_INVALID_TRANSFORM_DESTINATION),
    "stream": (errors.STREAM_TRANSFORM_INVALID_SOURCE, errors.STREAM_TRANSFORM_INVALID_DESTINATION),
}


def compile_transform(
    src: str, dest: str, *, of: Of = "source", rng: random.Random | None = None
) -> Transform:
    """A transform of a source (of="source"), a mirror or a stream; JsApiError as nats-server."""
    bad_src, bad_dest = ERRORS[of]
    if src and not is_valid_subject(src):
        raise bad_src.format(err=f"invalid subject {src}")
    source = src or ">"
    wildcards = tuple(i for i, token in enumerate(source.split(".")) if token == "*")
    if not dest or (source == ">" and dest == ">"):
        return Transform(source, dest or source, (), wildcards)
    try:
        steps = build_steps(source, dest)
    except MappingError as exc:
        raise bad_dest.format(err=str(exc)) from None
    uses_random = any(step.kind == "random" for step in steps)
    if rng is None and uses_random:
        rng = random.Random()  # seeded by the OS: a random mapping is random in production
    return Transform(source, dest, steps, wildcards, rng)


def compile_all(entries: object, *, of: Of = "source") -> list[Transform]:
    """A source's or mirror's `subject_transforms` (already echo-checked JSON) compiled in order."""
    out: list[Transform] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            raise errors.INVALID_JSON.format(err="json: cannot unmarshal into SubjectTransformConfig")
        out.append(compile_transform(str(entry.get("src") or ""), str(entry.get("dest") or ""), of=of))
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
    if not transform.steps:
        return on_msg

    def on_transformed(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        renamed = transform.apply_bytes(subject)
        if renamed is None:
            on_msg(subject, reply, header, data)
        else:
            on_msg(renamed.decode("utf-8", "replace").encode(), reply, header, data)

    return on_transformed
