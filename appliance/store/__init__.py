"""appliance.store: stream storage (DESIGN.md §5).

- api.py        the StreamStore contract, StoreLimits, StoredMsg, StreamState
- index.py      StreamIndex: live sequences, per-subject totals, limits and retention (shared)
- memory.py     MemoryStreamStore
- filestore.py  FileStreamStore over segment files; recovery.py replays a directory on open
- records.py, segment.py   the on-disk formats (pure); speedups.py their native twins
- commit.py     GroupCommitter: group commit driven by the owner's loop
- fileops.py    the injected file-system interface (appliance/testing/faultfs.py for crash tests)
- snapshot.py, placement.py, inspect.py, overlay.py, scan.py, subjects.py, layout.py
- raftlog.py    the RAFT log (a separate owner)
"""
