"""StreamIndex: which sequences are live, their subject, size and time; per-subject totals; limits.

Pure bookkeeping shared by both stores, so limits and retention behave identically in memory and
on disk. The stores keep the message bytes; the index decides what exists.

Theory of operation. Live sequences sit in *runs*: contiguous ranges of sequences kept as packed
arrays (subject id, accounted size, timestamp), at most `STORE_INDEX_RUN_MSGS` each. A removed
sequence is marked DEAD in place; runs that empty at the head are dropped, so memory follows the
live range. Subjects are interned to small integer ids; each id has totals (count, first, last).
A subject's first/last become *stale* when that message is removed and are recomputed on demand
(nats-server's lazy "first needs update"). Expiry looks only at the head: messages are stored in
time order, so the first live message is the oldest one.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterator

from appliance import limits
from appliance.store import api, subjects

DEAD = 0xFFFFFFFF


class _Run:
    __slots__ = ("base", "subject_ids", "sizes", "times", "live")

    def __init__(self, base: int) -> None:
        self.base = base
        self.subject_ids = array("I")
        self.sizes = array("I")
        self.times = array("q")
        self.live = 0

    def end(self) -> int:
        return self.base + len(self.subject_ids)


class _Totals:
    __slots__ = ("count", "first", "last", "first_stale", "last_stale")

    def __init__(self, seq: int) -> None:
        self.count = 0
        self.first = seq
        self.last = seq
        self.first_stale = False
        self.last_stale = False


class StreamIndex:
    def __init__(self, store_limits: api.StoreLimits) -> None:
        self.limits = store_limits
        self.first_seq = 1
        self.last_seq = 0
        self.msgs = 0
        self.bytes = 0
        self.last_ts_ns = 0
        self._runs: list[_Run] = []
        self._bases: list[int] = []
        self._ids: dict[str, int] = {}
        self._names: list[str] = []
        self._free_ids: list[int] = []
        self._totals: dict[int, _Totals] = {}

    # --- lookups ----------------------------------------------------------------------------------

    def _locate(self, seq: int) -> tuple[_Run, int] | None:
        if not self._runs or seq < self._bases[0]:
            return None
        run = self._runs[bisect_right(self._bases, seq) - 1]
        offset = seq - run.base
        if offset >= len(run.subject_ids):
            return None
        return run, offset

    def is_live(self, seq: int) -> bool:
        found = self._locate(seq)
        return found is not None and found[0].subject_ids[found[1]] != DEAD

    def subject_of(self, seq: int) -> str:
        found = self._locate(seq)
        assert found is not None
        return self._names[found[0].subject_ids[found[1]]]

    def size_of(self, seq: int) -> int:
        found = self._locate(seq)
        assert found is not None
        return found[0].sizes[found[1]]

    def ts_of(self, seq: int) -> int:
        found = self._locate(seq)
        assert found is not None
        return found[0].times[found[1]]

    def first_ts_ns(self) -> int:
        return self.ts_of(self.first_seq) if self.msgs else 0

    def subject_count(self, subject: str) -> int:
        sid = self._ids.get(subject)
        return 0 if sid is None else self._totals[sid].count

    def num_subjects(self) -> int:
        return len(self._totals)

    # --- mutations --------------------------------------------------------------------------------

    def add(self, seq: int, subject: str, size: int, timestamp_ns: int) -> None:
        assert seq > self.last_seq, "sequences only move forward"
        sid = self._intern(subject)
        run = self._runs[-1] if self._runs else None
        if run is None or run.end() != seq or len(run.subject_ids) >= limits.STORE_INDEX_RUN_MSGS:
            run = _Run(seq)
            self._runs.append(run)
            self._bases.append(seq)
        run.subject_ids.append(sid)
        run.sizes.append(size)
        run.times.append(timestamp_ns)
        run.live += 1
        self.msgs += 1
        self.bytes += size
        if self.msgs == 1:
            self.first_seq = seq
        self.last_seq = seq
        self.last_ts_ns = timestamp_ns
        totals = self._totals.get(sid)
        if totals is None:
            totals = self._totals[sid] = _Totals(seq)
        totals.count += 1
        totals.last = seq
        totals.last_stale = False
        if totals.count == 1:
            totals.first = seq
            totals.first_stale = False

    def add_many(self, first_seq: int, names: list[str], sizes: list[int], times: list[int]) -> None:
        """add() for consecutive sequences from first_seq (the batch fast path; no limits)."""
        assert first_seq > self.last_seq, "sequences only move forward"
        count = len(names)
        if count == 0:
            return
        local: dict[str, int] = {}
        sids = [local[n] if n in local else local.setdefault(n, self._intern(n)) for n in names]
        done = 0
        while done < count:
            run = self._runs[-1] if self._runs else None
            seq = first_seq + done
            if run is None or run.end() != seq or len(run.subject_ids) >= limits.STORE_INDEX_RUN_MSGS:
                run = _Run(seq)
                self._runs.append(run)
                self._bases.append(seq)
            take = min(count - done, limits.STORE_INDEX_RUN_MSGS - len(run.subject_ids))
            run.subject_ids.extend(sids[done : done + take])
            run.sizes.extend(sizes[done : done + take])
            run.times.extend(times[done : done + take])
            run.live += take
            done += take
        if self.msgs == 0:
            self.first_seq = first_seq
        self.msgs += count
        self.bytes += sum(sizes)
        self.last_seq = first_seq + count - 1
        self.last_ts_ns = times[-1]
        if len(local) == 1:
            self._count_subject(sids[0], first_seq, self.last_seq, count)
            return
        firsts: dict[int, int] = {}
        lasts: dict[int, int] = {}
        counts: dict[int, int] = {}
        for offset, sid in enumerate(sids):
            if sid not in firsts:
                firsts[sid] = first_seq + offset
                counts[sid] = 0
            counts[sid] += 1
            lasts[sid] = first_seq + offset
        for sid, first in firsts.items():
            self._count_subject(sid, first, lasts[sid], counts[sid])

    def _count_subject(self, sid: int, first: int, last: int, count: int) -> None:
        totals = self._totals.get(sid)
        if totals is None:
            totals = self._totals[sid] = _Totals(first)
        if totals.count == 0:
            totals.first = first
            totals.first_stale = False
        totals.count += count
        totals.last = last
        totals.last_stale = False

    def remove(self, seq: int) -> bool:
        found = self._locate(seq)
        if found is None:
            return False
        run, offset = found
        sid = run.subject_ids[offset]
        if sid == DEAD:
            return False
        run.subject_ids[offset] = DEAD
        run.live -= 1
        self.msgs -= 1
        self.bytes -= run.sizes[offset]
        totals = self._totals[sid]
        totals.count -= 1
        if totals.count == 0:
            del self._totals[sid]
            del self._ids[self._names[sid]]
            self._free_ids.append(sid)
        else:
            totals.first_stale = totals.first_stale or seq == totals.first
            totals.last_stale = totals.last_stale or seq == totals.last
        if seq == self.first_seq:
            self._advance_first()
        return True

    def skip_to(self, seq: int) -> list[int]:
        """Remove everything below seq; an empty stream then starts at seq (Compact / purge all)."""
        removed: list[int] = []
        for live in self.live_seqs(1):
            if live >= seq:
                break
            removed.append(live)
        for s in removed:
            self.remove(s)
        if seq > self.last_seq + 1:
            self.last_seq = seq - 1
        if self.msgs == 0:
            self.first_seq = self.last_seq + 1
            self._runs.clear()
            self._bases.clear()
        return removed

    def advance_last(self, seq: int) -> None:
        """Move last_seq forward without a message (a restored or recovered stream's tail)."""
        if seq <= self.last_seq:
            return
        self.last_seq = seq
        if self.msgs == 0:
            self.first_seq = seq + 1

    def _intern(self, subject: str) -> int:
        sid = self._ids.get(subject)
        if sid is not None:
            return sid
        if self._free_ids:
            sid = self._free_ids.pop()
            self._names[sid] = subject
        else:
            sid = len(self._names)
            self._names.append(subject)
        self._ids[subject] = sid
        return sid

    def _advance_first(self) -> None:
        while self._runs and self._runs[0].live == 0:
            self._runs.pop(0)
            self._bases.pop(0)
        if self.msgs == 0:
            assert not self._runs
            self.first_seq = self.last_seq + 1
            return
        run = self._runs[0]
        offset = max(self.first_seq - run.base, 0)
        ids = run.subject_ids
        while ids[offset] == DEAD:
            offset += 1
        self.first_seq = run.base + offset

    # --- iteration and search ---------------------------------------------------------------------

    def live_seqs(self, start_seq: int, filter_subject: str = ">") -> Iterator[int]:
        """Live sequences >= start_seq whose subject matches, in order."""
        wanted = self._matching_ids(filter_subject)
        if wanted is not None and not wanted:
            return
        start = max(start_seq, self.first_seq)
        k = max(bisect_right(self._bases, start) - 1, 0)
        for run in self._runs[k:]:
            ids = run.subject_ids
            offset = max(start - run.base, 0)
            if wanted is None:
                for i in range(offset, len(ids)):
                    if ids[i] != DEAD:
                        yield run.base + i
            elif len(wanted) == 1:
                (sid,) = wanted
                end = len(ids)
                while offset < end:
                    try:
                        offset = ids.index(sid, offset, end)
                    except ValueError:
                        break
                    yield run.base + offset
                    offset += 1
            else:
                for i in range(offset, len(ids)):
                    if ids[i] in wanted:
                        yield run.base + i

    def live_count_from(self, start_seq: int) -> int:
        """How many live sequences are >= start_seq: whole runs by their live counts."""
        start = max(start_seq, self.first_seq)
        total = 0
        for run in reversed(self._runs):
            if run.base >= start:
                total += run.live
                continue
            tail = run.subject_ids[start - run.base :]
            total += len(tail) - tail.count(DEAD)
            break
        return total

    def dead_in(self, first: int, last: int) -> set[int]:
        """Sequences in [first, last] (at most last_seq) that are not live; usually few or none."""
        last = min(last, self.last_seq)
        dead = set(range(first, min(last + 1, self.first_seq)))
        expected = max(first, self.first_seq)
        k = max(bisect_right(self._bases, expected) - 1, 0)
        for run in self._runs[k:]:
            if run.base > last:
                break
            if run.base > expected:
                dead.update(range(expected, run.base))
            ids = run.subject_ids
            lo = max(expected - run.base, 0)
            hi = min(last - run.base + 1, len(ids))
            while lo < hi:
                try:
                    lo = ids.index(DEAD, lo, hi)
                except ValueError:
                    break
                dead.add(run.base + lo)
                lo += 1
            expected = max(expected, run.end())
        if expected <= last:
            dead.update(range(expected, last + 1))
        return dead

    def next_live(self, start_seq: int, filter_subject: str = ">") -> int | None:
        if subjects.is_literal(filter_subject) and not subjects.matches_all(filter_subject):
            sid = self._ids.get(filter_subject)
            if sid is None:
                return None
            totals = self._totals[sid]
            if start_seq > totals.last and not totals.last_stale:
                return None
            start_seq = max(start_seq, self._first_of(sid))
        return next(self.live_seqs(start_seq, filter_subject), None)

    def last_live(self, filter_subject: str = ">") -> int | None:
        if subjects.matches_all(filter_subject):
            return self.last_seq if self.msgs and self.is_live(self.last_seq) else self._scan_back(None)
        wanted = self._matching_ids(filter_subject)
        if not wanted:
            return None
        if len(wanted) == 1:
            (sid,) = wanted
            return self._last_of(sid)
        return max(self._last_of(sid) for sid in wanted)

    def _first_of(self, sid: int) -> int:
        totals = self._totals[sid]
        if totals.first_stale:
            found = next(self.live_seqs(totals.first, self._names[sid]), None)
            assert found is not None
            totals.first = found
            totals.first_stale = False
        return totals.first

    def _last_of(self, sid: int) -> int:
        totals = self._totals[sid]
        if totals.last_stale:
            found = self._scan_back(sid, before=totals.last)
            assert found is not None
            totals.last = found
            totals.last_stale = False
        return totals.last

    def _scan_back(self, sid: int | None, before: int | None = None) -> int | None:
        limit = self.last_seq if before is None else before
        for run in reversed(self._runs):
            if run.base > limit:
                continue
            ids = run.subject_ids
            for i in range(min(limit - run.base, len(ids) - 1), -1, -1):
                value = ids[i]
                if value != DEAD and (sid is None or value == sid):
                    return run.base + i
        return None

    def _matching_ids(self, filter_subject: str) -> set[int] | None:
        """None means every subject; a set (maybe empty) lists the matching subject ids."""
        if subjects.matches_all(filter_subject):
            return None
        if subjects.is_literal(filter_subject):
            sid = self._ids.get(filter_subject)
            return set() if sid is None else {sid}
        return {sid for name, sid in self._ids.items() if subjects.subject_matches(filter_subject, name)}

    def subject_counts(self, filter_subject: str = ">") -> dict[str, int]:
        wanted = self._matching_ids(filter_subject)
        sids = self._totals.keys() if wanted is None else wanted
        return {self._names[sid]: self._totals[sid].count for sid in sids}

    def deleted(self) -> list[int]:
        """Interior gaps between first_seq and last_seq (nats-server's `deleted` list)."""
        gaps: list[int] = []
        if self.msgs == 0:
            return gaps
        expected = self.first_seq
        for seq in self.live_seqs(self.first_seq):
            gaps.extend(range(expected, seq))
            expected = seq + 1
        gaps.extend(range(expected, self.last_seq + 1))
        return gaps

    # --- limits and retention ---------------------------------------------------------------------

    def check_admit(self, subject: str, size: int, content_bytes: int) -> None:
        """Raise StoreLimitError when this message must be refused (max_msg_size, discard new)."""
        lim = self.limits
        if lim.max_msg_size >= 0 and content_bytes > lim.max_msg_size:
            raise api.StoreLimitError(api.MAX_MSG_SIZE_EXCEEDED)
        if lim.discard != "new":
            return
        sid = self._ids.get(subject)
        count = 0 if sid is None else self._totals[sid].count
        at_subject_limit = lim.max_msgs_per_subject > 0 and count >= lim.max_msgs_per_subject
        if at_subject_limit and lim.discard_new_per_subject:
            raise api.StoreLimitError(api.MAX_MSGS_PER_SUBJECT_EXCEEDED)
        if lim.max_msgs > 0 and self.msgs >= lim.max_msgs and not at_subject_limit:
            raise api.StoreLimitError(api.MAX_MSGS_EXCEEDED)
        if lim.max_bytes > 0 and self.bytes + size > lim.max_bytes:
            replaced = self.size_of(self._first_of(sid)) if at_subject_limit and sid is not None else 0
            if replaced < size:
                raise api.StoreLimitError(api.MAX_BYTES_EXCEEDED)

    def enforce(self, subject: str | None = None) -> list[int]:
        """Remove what the limits no longer allow (oldest first); returns the removed sequences."""
        lim = self.limits
        removed: list[int] = []
        if lim.max_msgs_per_subject > 0:
            for sid in self._subjects_over_limit(subject):
                while sid in self._totals and self._totals[sid].count > lim.max_msgs_per_subject:
                    seq = self._first_of(sid)
                    self.remove(seq)
                    removed.append(seq)
        while lim.max_msgs > 0 and self.msgs > lim.max_msgs:
            removed.append(self.first_seq)
            self.remove(self.first_seq)
        while lim.max_bytes > 0 and self.bytes > lim.max_bytes and self.msgs:
            removed.append(self.first_seq)
            self.remove(self.first_seq)
        return removed

    def _subjects_over_limit(self, subject: str | None) -> list[int]:
        if subject is not None:
            sid = self._ids.get(subject)
            return [] if sid is None else [sid]
        return [sid for sid, t in self._totals.items() if t.count > self.limits.max_msgs_per_subject]

    def expire(self, now_ns: int) -> list[int]:
        removed: list[int] = []
        if self.limits.max_age_ns <= 0:
            return removed
        cutoff = now_ns - self.limits.max_age_ns
        while self.msgs and self.ts_of(self.first_seq) <= cutoff:
            removed.append(self.first_seq)
            self.remove(self.first_seq)
        return removed

    def next_expiry_ns(self) -> int | None:
        if self.limits.max_age_ns <= 0 or self.msgs == 0:
            return None
        return self.ts_of(self.first_seq) + self.limits.max_age_ns

    def purge_plan(self, subject: str, *, keep: int, up_to_seq: int) -> list[int]:
        """The sequences nats-server's PurgeEx(subject, seq, keep) removes (not yet removed)."""
        assert not (keep and up_to_seq), "keep and seq are mutually exclusive"
        matching = list(self.live_seqs(self.first_seq, subject or ">"))
        if up_to_seq:
            return [s for s in matching if s < up_to_seq]
        if keep:
            return matching[:-keep] if keep < len(matching) else []
        return matching
