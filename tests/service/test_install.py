"""`appliance service install|uninstall` into a temporary --root: files, owners, idempotence, --force, --dry-run."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from appliance.cli.main import main
from appliance.cli.service_install import Command, Host, InstallError, install_plan, lookup_id, uninstall_plan
from appliance.config import load_config

SEED = {  # the seed's three hosts: one command each
    "n1-c1": ["--route", "nats://host_b:6222", "--route", "nats://host_c:6222"],
    "n2-c1": ["--route", "nats://host_a:6222", "--route", "nats://host_c:6222"],
    "n3-c1": ["--route", "nats://host_a:6222", "--route", "nats://host_b:6222"],
}
CAN_CREATE_USERS = shutil.which("systemd-sysusers") is not None or shutil.which("useradd") is not None


def service(*args: str) -> Result:
    return CliRunner().invoke(main, ["service", *args], catch_exceptions=False)


def install(root: Path, *args: str) -> Result:
    return service("install", "--root", str(root), "--executable", "/usr/local/bin/appliance", *args)


def snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Every path under root with its mode, owner, group and content (for 'nothing changed')."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        found[str(path.relative_to(root))] = (info.st_mode, info.st_uid, info.st_gid, content)
    return found


def test_install_writes_the_unit_user_dirs_and_config_with_owners_and_modes(tmp_path: Path) -> None:
    result = install(tmp_path, "--name", "n1-c1", "--cluster", "C1", *SEED["n1-c1"])
    assert result.exit_code == 0, result.output
    unit = (tmp_path / "etc/systemd/system/appliance.service").read_text()
    assert "ExecStart=/usr/local/bin/appliance run -c /etc/appliance/appliance.conf" in unit
    config = tmp_path / "etc/appliance/appliance.conf"
    options = load_config(str(config), pedantic=True)
    assert (options.server_name, options.cluster.name) == ("n1-c1", "C1")
    assert options.cluster.routes == ["nats://host_b:6222", "nats://host_c:6222"]
    assert stat.S_IMODE(config.stat().st_mode) == 0o640
    store = tmp_path / "var/lib/appliance"
    assert stat.S_IMODE(store.stat().st_mode) == 0o750
    assert (tmp_path / "etc/sysusers.d/appliance.conf").is_file()
    assert (tmp_path / "etc/tmpfiles.d/appliance.conf").is_file()
    if CAN_CREATE_USERS:
        uid = lookup_id(Host(tmp_path, False, shutil.which), "passwd", "appliance")
        assert uid is not None, result.output
        if os.geteuid() == 0:
            assert (store.stat().st_uid, config.stat().st_uid) == (uid, 0)
    if shutil.which("systemctl"):  # enabled offline into the root
        assert (tmp_path / "etc/systemd/system/multi-user.target.wants/appliance.service").is_symlink()
        assert "ran: systemctl --root=" in result.output


def test_installing_twice_changes_nothing(tmp_path: Path) -> None:
    assert install(tmp_path, "--name", "n1-c1").exit_code == 0
    before = snapshot(tmp_path)
    again = install(tmp_path, "--name", "n1-c1")
    assert again.exit_code == 0, again.output
    assert snapshot(tmp_path) == before
    assert "wrote" not in again.output and "created" not in again.output


def test_a_changed_config_is_kept_unless_force(tmp_path: Path) -> None:
    assert install(tmp_path, "--name", "n1-c1").exit_code == 0
    config = tmp_path / "etc/appliance/appliance.conf"
    edited = config.read_text() + "max_payload: 2MB\n"
    config.write_text(edited)
    refused = install(tmp_path, "--name", "n1-c1")
    assert refused.exit_code == 1
    assert "exists and differs" in refused.output and "--force" in refused.output
    assert config.read_text() == edited
    forced = install(tmp_path, "--name", "n1-c1", "--force")
    assert forced.exit_code == 0, forced.output
    assert "max_payload" not in config.read_text()
    assert (tmp_path / "etc/appliance/appliance.conf.bak").read_text() == edited


def test_dry_run_changes_nothing_and_says_what_it_would_do(tmp_path: Path) -> None:
    result = install(tmp_path, "--name", "n1-c1", "--dry-run")
    assert result.exit_code == 0, result.output
    assert list(tmp_path.iterdir()) == []
    assert f"would write: {tmp_path}/etc/systemd/system/appliance.service" in result.output
    assert f"would create: {tmp_path}/var/lib/appliance (appliance:appliance 0750)" in result.output


def test_install_from_a_config_file_uses_its_store_dir(tmp_path: Path) -> None:
    source = tmp_path / "mine.conf"
    source.write_text('server_name: x\njetstream { store_dir: "/srv/nvme0/js" }\n')
    root = tmp_path / "root"
    result = install(root, "--config", str(source))
    assert result.exit_code == 0, result.output
    assert (root / "etc/appliance/appliance.conf").read_text() == source.read_text()
    assert (root / "srv/nvme0/js").is_dir()
    assert "ReadWritePaths=/srv/nvme0/js" in (root / "etc/systemd/system/appliance.service").read_text()


def test_a_config_that_does_not_load_installs_nothing(tmp_path: Path) -> None:
    source = tmp_path / "bad.conf"
    source.write_text("listen: {\n")
    root = tmp_path / "root"
    result = install(root, "--config", str(source))
    assert result.exit_code == 1 and "the config does not load" in result.output
    assert not root.exists()


def test_the_seed_cluster_is_one_command_per_host(tmp_path: Path) -> None:
    for name, routes in SEED.items():
        root = tmp_path / name
        assert install(root, "--name", name, "--cluster", "C1", *routes).exit_code == 0
        options = load_config(str(root / "etc/appliance/appliance.conf"), pedantic=True)
        assert (options.server_name, options.cluster.name, options.cluster.port) == (name, "C1", 6222)
        assert len(options.cluster.routes) == 2


def test_uninstall_keeps_config_and_store_unless_purge(tmp_path: Path) -> None:
    assert install(tmp_path, "--name", "n1-c1").exit_code == 0
    removed = service("uninstall", "--root", str(tmp_path))
    assert removed.exit_code == 0, removed.output
    assert not (tmp_path / "etc/systemd/system/appliance.service").exists()
    assert not (tmp_path / "etc/systemd/system/multi-user.target.wants/appliance.service").is_symlink()
    assert (tmp_path / "etc/appliance/appliance.conf").exists() and (tmp_path / "var/lib/appliance").is_dir()
    purged = service("uninstall", "--root", str(tmp_path), "--purge")
    assert purged.exit_code == 0, purged.output
    assert not (tmp_path / "etc/appliance").exists() and not (tmp_path / "var/lib/appliance").exists()
    assert "absent:" in purged.output  # the unit was already gone: uninstall is idempotent too


def test_on_a_host_without_systemd_the_commands_are_told_not_run() -> None:
    host = Host(root=Path("/"), systemd_running=False, which=lambda name: f"/usr/bin/{name}")
    steps = install_plan(host, config_text="", store_dir="/var/lib/appliance", user="appliance",
                         executable="/usr/local/bin/appliance")
    told = [(s.text(), s.skip_reason) for s in steps if isinstance(s, Command) and s.argv[0] == "systemctl"]
    assert told == [("systemctl daemon-reload", "systemd is not the init system here"),
                    ("systemctl enable --now appliance.service", "systemd is not the init system here")]
    running = Host(root=Path("/"), systemd_running=True, which=lambda name: f"/usr/bin/{name}")
    undo = [s.text() for s in uninstall_plan(running, purge=False, store_dir="/var/lib/appliance")
            if isinstance(s, Command)]
    assert undo == ["systemctl disable --now appliance.service", "systemctl daemon-reload"]


def test_an_executable_under_home_is_refused_because_the_unit_hides_home() -> None:
    host = Host(root=Path("/"), systemd_running=False, which=shutil.which)
    with pytest.raises(InstallError, match="ProtectHome"):
        install_plan(host, config_text="", store_dir="/var/lib/appliance", user="appliance",
                     executable="/home/me/.venv/bin/appliance")
