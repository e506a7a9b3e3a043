"""Subject sets and the wildcard mappings of account imports, pure and on bytes.

An import maps subjects between two accounts' subject spaces: a stream import from `foo.>` with
prefix `p` delivers `foo.x` as `p.foo.x`; `to: "bar.*"` for `foo.*` delivers `foo.x` as `bar.x`.
nats-server builds these as strict transforms (every wildcard of the source used, in order), so a
mapping here is the i-th wildcard token(s) of the source written where the i-th wildcard of the
destination stands. The same shape maps back (reverse) for the shadow subscriptions.
"""

from __future__ import annotations

PWC = b"*"
FWC = b">"


class MappingError(ValueError):
    pass


def tokens(subject: bytes) -> list[bytes]:
    return subject.split(b".")


def has_wildcard(subject: bytes) -> bool:
    return any(token in (PWC, FWC) for token in tokens(subject))


def is_literal(subject: bytes) -> bool:
    return not has_wildcard(subject)


def is_valid(subject: bytes) -> bool:
    if not subject:
        return False
    parts = tokens(subject)
    for i, token in enumerate(parts):
        if not token or any(c in b" \t\r\n" for c in token):
            return False
        if token == FWC and i != len(parts) - 1:
            return False
    return True


def is_subset(subject: bytes, pattern: bytes) -> bool:
    """Every subject `subject` matches is matched by `pattern` (nats-server's isSubsetMatch)."""
    sub, pat = tokens(subject), tokens(pattern)
    for i, token in enumerate(pat):
        if i >= len(sub):
            return False
        if token == FWC:
            return True
        if token == PWC:
            if sub[i] == FWC:
                return False
            continue
        if sub[i] != token:
            return False
    return len(sub) == len(pat)


def collide(a: bytes, b: bytes) -> bool:
    """Some subject is matched by both patterns (nats-server's SubjectsCollide)."""
    x, y = tokens(a), tokens(b)
    for i in range(max(len(x), len(y))):
        if i >= len(x) or i >= len(y):
            return False
        s, t = x[i], y[i]
        if s == FWC or t == FWC:
            return True
        if s == PWC or t == PWC or s == t:
            continue
        return False
    return True


class SubjectMap:
    """`src` pattern -> `dest` pattern, wildcard by wildcard (both with the same wildcards in order)."""

    __slots__ = ("src", "dest", "_dest_tokens", "_slots", "_identity")

    def __init__(self, src: bytes, dest: bytes) -> None:
        self.src = src
        self.dest = dest
        src_wild = [t for t in tokens(src) if t in (PWC, FWC)]
        dest_wild = [t for t in tokens(dest) if t in (PWC, FWC)]
        if src_wild != dest_wild:
            raise MappingError("invalid mapping destination: not using all of the token wildcard(s)")
        self._dest_tokens = tokens(dest)
        # positions in the source whose tokens fill the destination's wildcards, in order
        self._slots = [i for i, t in enumerate(tokens(src)) if t in (PWC, FWC)]
        self._identity = src == dest

    def reverse(self) -> SubjectMap:
        return SubjectMap(self.dest, self.src)

    def apply(self, subject: bytes) -> bytes:
        """The mapped subject (`subject` is matched by, or a subset of, `src`)."""
        if self._identity:
            return subject
        if not self._slots:
            return self.dest
        parts = tokens(subject)
        captured = [parts[slot] for slot in self._slots]
        if self.src.endswith(b">"):  # the last wildcard takes the rest of the subject
            captured[-1] = b".".join(parts[self._slots[-1]:])
        out: list[bytes] = []
        n = 0
        for token in self._dest_tokens:
            if token in (PWC, FWC):
                out.append(captured[n])
                n += 1
            else:
                out.append(token)
        return b".".join(out)
