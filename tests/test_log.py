"""appliance/log.py: journald detection (logtime off under systemd), log_file rotation as nats-server's
logfile_size_limit / logfile_max_num, shared by several processes without losing a line."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.cli.run import options_for
from appliance.log import BACKUP_SUFFIX, NatsFormatter, RotatingLogFile, stderr_is_journal


def journal_stream_of(fd: int) -> str:
    info = os.fstat(fd)
    return f"{info.st_dev}:{info.st_ino}"


def test_stderr_is_the_journal_only_when_journal_stream_names_it(tmp_path: Path) -> None:
    with (tmp_path / "stream").open("w") as stream:
        fd = stream.fileno()
        assert stderr_is_journal({"JOURNAL_STREAM": journal_stream_of(fd)}, fd=fd)
        assert not stderr_is_journal({"JOURNAL_STREAM": "1:2"}, fd=fd)
        assert not stderr_is_journal({}, fd=fd)
        assert not stderr_is_journal({"JOURNAL_STREAM": "garbage"}, fd=fd)


def test_logtime_defaults_to_false_under_journald_unless_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain, explicit = tmp_path / "plain.conf", tmp_path / "explicit.conf"
    plain.write_text("port: 4222\n")
    explicit.write_text("port: 4222\nlogtime: true\n")
    assert options_for(["-c", str(plain)])[0].logtime  # not under journald: nats-server's default
    monkeypatch.setenv("JOURNAL_STREAM", journal_stream_of(2))
    assert not options_for(["-c", str(plain)])[0].logtime
    assert options_for(["-c", str(explicit)])[0].logtime
    assert options_for(["-c", str(plain), "--logtime=true"])[0].logtime
    assert options_for(["-c", str(plain), "-l", str(tmp_path / "x.log")])[0].logtime  # a file has no journal


def handler_logger(path: Path, *, size_limit: int, max_num: int) -> tuple[logging.Logger, RotatingLogFile]:
    handler = RotatingLogFile(str(path), size_limit=size_limit, max_num=max_num)
    handler.setFormatter(NatsFormatter(logtime=False))
    logger = logging.getLogger(f"test-rotation-{path.name}")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return logger, handler


def backups(path: Path) -> list[Path]:
    return sorted(p for p in path.parent.iterdir()
                  if p.name.startswith(path.name + ".") and BACKUP_SUFFIX.fullmatch(p.name[len(path.name):]))


def test_rotation_names_backups_as_nats_server_and_keeps_max_num_files(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    logger, handler = handler_logger(path, size_limit=1000, max_num=3)
    try:
        for index in range(200):
            logger.info("line %03d %s", index, "x" * 40)
    finally:
        logger.removeHandler(handler)
        handler.close()
    kept = backups(path)
    assert len(kept) == 2  # logfile_max_num 3: the live file and two backups
    live = path.read_text()
    assert re.search(r'\[INF\] Rotated log, backup saved as "' + re.escape(str(path)) + r'\.\d{4}(\.\d{2}){5}\.\d{9}"',
                     live)
    assert "[INF] Purged log file" in live
    assert "line 199" in live + kept[-1].read_text()  # the newest lines survive the purge
    assert all(p.stat().st_size <= 1000 + 200 for p in kept)  # rotated on the write that crossed the limit


WRITER = '''
import logging, sys
from appliance.log import NatsFormatter, RotatingLogFile
handler = RotatingLogFile(sys.argv[1], size_limit=2000)
handler.setFormatter(NatsFormatter(logtime=False))
logger = logging.getLogger("w")
logger.addHandler(handler)
logger.setLevel(logging.INFO)
for index in range(int(sys.argv[3])):
    logger.info("%s-%05d", sys.argv[2], index)
'''


def test_processes_sharing_the_file_lose_no_line_across_rotations(tmp_path: Path) -> None:
    """The supervisor and its workers write one log_file: every line lands in the live file or a backup."""
    path = tmp_path / "shared.log"
    lines = 400
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, str(lines)])
               for name in ("supervisor", "worker0", "worker1")]
    assert [writer.wait(timeout=60) for writer in writers] == [0, 0, 0]
    text = "".join(p.read_text() for p in [path, *backups(path)])
    for name in ("supervisor", "worker0", "worker1"):
        found = re.findall(rf"\[INF\] {name}-(\d{{5}})\n", text)
        assert sorted(int(n) for n in found) == list(range(lines)), name
    assert len(backups(path)) >= 3
