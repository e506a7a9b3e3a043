"""`appliance service install|uninstall`: the steps, planned first, then applied or only told.

A plan is a list of steps (write a file, make a directory, run a command); `apply` carries each
out and says what it did, `--dry-run` says what each would do. Everything lands under `root`
("/" on a real host; tests and image builders pass a directory), so the same plan installs into
a host or an image:

    <root>/etc/sysusers.d/appliance.conf      the system user (systemd-sysusers creates it)
    <root>/etc/tmpfiles.d/appliance.conf      its directories
    <root>/etc/appliance/appliance.conf       the config: root:appliance 0640 (never overwritten
                                              when changed, unless --force: the old one is kept as .bak)
    <root>/var/lib/appliance (or --store-dir) the store: appliance:appliance 0750
    <root>/etc/systemd/system/appliance.service

then `systemctl daemon-reload` and `systemctl enable --now appliance.service` when `root` is "/"
and systemd is the running init; into another root, `systemctl --root=ROOT enable` (offline);
otherwise the exact commands are printed, not run. Installing twice changes nothing the second time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance.cli.service_unit import (
    CONFIG_DIR, CONFIG_PATH, STATE_DIR, UNIT_NAME, UnitSettings, render_sysusers, render_tmpfiles, render_unit,
)

UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
SYSUSERS_PATH = "/etc/sysusers.d/appliance.conf"
TMPFILES_PATH = "/etc/tmpfiles.d/appliance.conf"
SYSTEMD_RUNNING_MARK = "/run/systemd/system"  # sd_booted(): systemd is the init
HIDDEN_BY_PROTECT_HOME = ("/home/", "/root/", "/run/user/")
COMMAND_TIMEOUT_S = 120.0


class InstallError(Exception):
    """The install cannot go on; nothing after the failing step was done."""


@dataclass(frozen=True, slots=True)
class WriteFile:
    path: str  # absolute, inside root
    text: str
    mode: int
    owner: str = "root"
    group: str = "root"
    guarded: bool = False  # the operator's file: a changed one is kept unless --force


@dataclass(frozen=True, slots=True)
class MakeDir:
    path: str
    mode: int
    owner: str
    group: str


@dataclass(frozen=True, slots=True)
class RemovePath:
    path: str
    tree: bool = False


@dataclass(frozen=True, slots=True)
class Command:
    argv: tuple[str, ...]
    skip_reason: str = ""  # when set, the command is told, not run

    def text(self) -> str:
        return " ".join(self.argv)


@dataclass(frozen=True, slots=True)
class Note:
    text: str


Step = WriteFile | MakeDir | RemovePath | Command | Note


@dataclass(frozen=True, slots=True)
class Host:
    """What the plan needs to know about the machine (injected in tests)."""

    root: Path
    systemd_running: bool
    which: Callable[[str], str | None]

    @property
    def is_live_root(self) -> bool:
        return self.root.resolve() == Path("/")

    def inside(self, path: str) -> Path:
        return self.root / path.lstrip("/")


def this_host(root: Path) -> Host:
    return Host(root=root, systemd_running=os.path.isdir(SYSTEMD_RUNNING_MARK), which=shutil.which)


def _root_flag(host: Host) -> tuple[str, ...]:
    return () if host.is_live_root else (f"--root={host.root}",)


def install_plan(host: Host, *, config_text: str, store_dir: str, user: str, executable: str) -> list[Step]:
    if executable.startswith(HIDDEN_BY_PROTECT_HOME):
        raise InstallError(f"{executable} is under a home directory, which the unit hides (ProtectHome=yes): "
                           "install appliance outside /home, /root and /run/user (e.g. pipx into /opt) "
                           "or pass --executable")
    if not os.path.isabs(store_dir):
        raise InstallError(f"--store-dir {store_dir}: an absolute path is needed")
    extra = () if store_dir == STATE_DIR or store_dir.startswith(STATE_DIR + "/") else (store_dir,)
    unit = render_unit(UnitSettings(executable=executable, user=user, extra_writable=extra))
    steps: list[Step] = [
        WriteFile(SYSUSERS_PATH, render_sysusers(user), 0o644),
        _create_user(host, user),
        WriteFile(TMPFILES_PATH, render_tmpfiles(user), 0o644),
        MakeDir(CONFIG_DIR, 0o750, "root", user),
        WriteFile(CONFIG_PATH, config_text, 0o640, "root", user, guarded=True),
        MakeDir(store_dir, 0o750, user, user),
        WriteFile(UNIT_PATH, unit, 0o644),
    ]
    steps += _systemctl(host, ("enable", "--now", UNIT_NAME) if host.is_live_root else ("enable", UNIT_NAME))
    return steps


def uninstall_plan(host: Host, *, purge: bool, store_dir: str) -> list[Step]:
    steps: list[Step] = list(_systemctl(host, ("disable", "--now", UNIT_NAME) if host.is_live_root
                                        else ("disable", UNIT_NAME), reload_after=False))
    steps += [RemovePath(UNIT_PATH), RemovePath(TMPFILES_PATH), RemovePath(SYSUSERS_PATH)]
    if host.is_live_root:
        steps += [step for step in _systemctl(host, ()) if isinstance(step, Command)]
    if purge:  # the user stays: files it owned elsewhere would be orphaned (as Debian's packages do)
        steps += [RemovePath(CONFIG_DIR, tree=True), RemovePath(store_dir, tree=True)]
    return steps


def _create_user(host: Host, user: str) -> Command | Note:
    if lookup_id(host, "passwd", user) is not None:
        return Note(f"user {user} exists")
    sysusers = host.which("systemd-sysusers")
    if sysusers is not None:
        return Command(("systemd-sysusers", *_root_flag(host), str(host.inside(SYSUSERS_PATH))))
    return Command(("useradd", *(("--root", str(host.root)) if not host.is_live_root else ()), "--system",
                    "--user-group", "--home-dir", STATE_DIR, "--shell", "/usr/sbin/nologin", user),
                   skip_reason="" if host.which("useradd") else "neither systemd-sysusers nor useradd is installed")


def _systemctl(host: Host, verb: tuple[str, ...], *, reload_after: bool = True) -> list[Step]:
    """daemon-reload then `verb` on the running systemd; offline (--root) into another root."""
    if not host.is_live_root:
        if not verb:
            return []
        reason = "" if host.which("systemctl") else "systemctl is not installed"
        return [Command(("systemctl", *_root_flag(host), *verb), skip_reason=reason)]
    reason = "" if host.systemd_running else "systemd is not the init system here"
    commands: list[Step] = [Command(("systemctl", "daemon-reload"), skip_reason=reason)] if reload_after or not verb \
        else []
    if verb:
        commands.append(Command(("systemctl", *verb), skip_reason=reason))
    return commands


# --- applying a plan ------------------------------------------------------------------------------


def apply(host: Host, steps: list[Step], *, force: bool, dry_run: bool,
          run: Callable[[tuple[str, ...]], subprocess.CompletedProcess[str]] | None = None) -> list[str]:
    """Carry out (or with dry_run, describe) each step; returns one line per step."""
    runner = run or _run
    lines: list[str] = []
    for step in steps:
        if isinstance(step, WriteFile):
            lines.append(_write(host, step, force=force, dry_run=dry_run))
        elif isinstance(step, MakeDir):
            lines.append(_make_dir(host, step, dry_run=dry_run))
        elif isinstance(step, RemovePath):
            lines.append(_remove(host, step, dry_run=dry_run))
        elif isinstance(step, Note):
            lines.append(step.text)
        elif step.skip_reason:
            lines.append(f"not run ({step.skip_reason}): {step.text()}")
        elif dry_run:
            lines.append(f"would run: {step.text()}")
        else:
            done = runner(step.argv)
            if done.returncode != 0:
                raise InstallError(f"{step.text()} failed (exit {done.returncode}): {done.stderr.strip()}")
            lines.append(f"ran: {step.text()}")
    return lines


def _run(argv: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)


def _write(host: Host, step: WriteFile, *, force: bool, dry_run: bool) -> str:
    path = host.inside(step.path)
    old = path.read_text() if path.is_file() else None
    if old == step.text:
        changed_owner = _own(host, path, step.mode, step.owner, step.group, dry_run=dry_run)
        return f"unchanged: {path}" + (f" ({changed_owner})" if changed_owner else "")
    if old is not None and step.guarded and not force:
        raise InstallError(f"{path} exists and differs from the one to install: keeping it "
                           "(pass --force to replace it; the old one is kept as .bak)")
    if dry_run:
        return f"would {'replace' if old is not None else 'write'}: {path}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if old is not None and step.guarded:
        shutil.copy2(path, path.with_name(path.name + ".bak"))
    scratch = path.with_name(f".{path.name}.new")
    scratch.write_text(step.text)
    os.chmod(scratch, step.mode)
    os.replace(scratch, path)
    owner_note = _own(host, path, step.mode, step.owner, step.group, dry_run=False)
    return f"{'replaced' if old is not None else 'wrote'}: {path}" + (f" ({owner_note})" if owner_note else "")


def _make_dir(host: Host, step: MakeDir, *, dry_run: bool) -> str:
    path = host.inside(step.path)
    existed = path.is_dir()
    if not existed:
        if dry_run:
            return f"would create: {path} ({step.owner}:{step.group} {step.mode:04o})"
        path.mkdir(parents=True, mode=step.mode)
    note = _own(host, path, step.mode, step.owner, step.group, dry_run=dry_run)
    return f"{'exists' if existed else 'created'}: {path}" + (f" ({note})" if note else "")


def _remove(host: Host, step: RemovePath, *, dry_run: bool) -> str:
    path = host.inside(step.path)
    if not path.exists() and not path.is_symlink():
        return f"absent: {path}"
    if dry_run:
        return f"would remove: {path}"
    if step.tree and path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    return f"removed: {path}"


def _own(host: Host, path: Path, mode: int, owner: str, group: str, *, dry_run: bool) -> str:
    """Mode and owner as the step wants them; returns a note when something was (or would be) changed
    or could not be."""
    uid, gid = lookup_id(host, "passwd", owner), lookup_id(host, "group", group)
    if uid is None or gid is None:
        return f"owner {owner}:{group} not known yet in {host.inside('/etc/passwd')}" if not dry_run else ""
    info = path.stat()
    notes = []
    if info.st_mode & 0o7777 != mode:
        notes.append(f"mode {mode:04o}")
        if not dry_run:
            os.chmod(path, mode)
    if (info.st_uid, info.st_gid) != (uid, gid):
        if dry_run:
            notes.append(f"owner {owner}:{group}")
        elif os.geteuid() == 0:
            os.chown(path, uid, gid)
            notes.append(f"owner {owner}:{group}")
        else:
            notes.append(f"owner {owner}:{group} not set: not running as root")
    return ", ".join(notes)


def lookup_id(host: Host, database: str, name: str) -> int | None:
    """The id of `name` in <root>/etc/passwd or /etc/group (the root's own files, not NSS)."""
    if name == "root":
        return 0
    try:
        text = host.inside(f"/etc/{database}").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[0] == name and fields[2].isdigit():
            return int(fields[2])
    return None
