"""The systemd files of an installed appliance, rendered from one place. Pure.

`systemd/` in the repository holds these files rendered with the defaults (a test keeps them
equal); `appliance service install` renders them with the host's paths (the `appliance`
executable, the user, a store dir outside /var/lib/appliance).

What the unit promises and why:
- Type=notify: the supervisor sends READY=1 once every worker serves clients and JetStream has
  recovered its store, STATUS= lines while starting, EXTEND_TIMEOUT_USEC= while a large store
  recovers (so TimeoutStartSec= bounds a stuck start, not a long one), WATCHDOG=1 only while every
  worker heartbeats (WatchdogSec=: a wedged worker makes systemd restart the service) and
  STOPPING=1 when it stops.
- Stop is lame duck (KillSignal=SIGUSR2, KillMode=mixed: only the supervisor gets it and forwards
  it to its workers): clients are told and moved off over lame_duck_duration (2m by default), then
  the server exits 0. TimeoutStopSec= covers nats-server's default duration plus the grace period,
  and at SIGUSR2 the supervisor asks (EXTEND_TIMEOUT_USEC=) for the configured lame_duck_duration plus
  graces, so a longer lame duck is not cut short; after that, SIGKILL.
- ExecReload= sends SIGHUP: the configuration is re-read as nats-server does.
- RuntimeDirectory=appliance is /run/appliance, where the control socket and the registry entry
  live (appliance/supervisor/control.py), so `appliance status` finds the server.
- Hardening: `systemd-analyze security` exposure 1.2. What the server still needs: its ports
  (AF_INET/AF_INET6; the control socket: AF_UNIX), shared memory (/dev/shm stays writable under
  ProtectSystem=strict; PrivateDevices= keeps it), its store (StateDirectory=, or ReadWritePaths=
  for another store dir), CPU pinning (sched_setaffinity is allowed back after ~@resources, with
  mbind, which numpy's OpenBLAS calls on import), and /proc/meminfo and /proc/stat (JetStream's
  memory limit, psutil), hence no ProcSubset=pid. tests/supervisor/test_sandbox_fit.py runs the
  server under strace and checks every system call and socket family it makes against the unit.
"""

from __future__ import annotations

from dataclasses import dataclass

UNIT_NAME = "appliance.service"
DEFAULT_EXECUTABLE = "/usr/local/bin/appliance"
DEFAULT_USER = "appliance"
CONFIG_DIR = "/etc/appliance"
CONFIG_PATH = f"{CONFIG_DIR}/appliance.conf"
STATE_DIR = "/var/lib/appliance"  # StateDirectory=appliance
RUN_DIR = "/run/appliance"  # RuntimeDirectory=appliance: appliance.supervisor.control.SYSTEM_RUN_DIR
LOGS_DIR = "/var/log/appliance"  # LogsDirectory=appliance: for log_file, if one is configured
WATCHDOG_SEC = 30  # well above the supervisor's heartbeat_late (2 s), below heartbeat_dead (60 s)
TIMEOUT_START_SEC = 90  # extended by EXTEND_TIMEOUT_USEC while JetStream recovers
TIMEOUT_STOP_SEC = 150  # lame_duck_duration (120 s) + lame_duck_grace_period (10 s) + margin
LIMIT_NOFILE = 1048576


@dataclass(frozen=True, slots=True)
class UnitSettings:
    executable: str = DEFAULT_EXECUTABLE
    user: str = DEFAULT_USER
    config_path: str = CONFIG_PATH
    extra_writable: tuple[str, ...] = ()  # store dirs outside STATE_DIR (ReadWritePaths=)


def render_unit(settings: UnitSettings = UnitSettings()) -> str:
    writable = "".join(f"ReadWritePaths={path}\n" for path in settings.extra_writable)
    return f"""\
# appliance: a JetStream-clustering NATS server (supervisor + workers), installed by
# `appliance service install`. Health check: `appliance status`. Reload: `systemctl reload appliance`.
[Unit]
Description=appliance JetStream-clustering NATS server
Documentation=https://docs.nats.io/running-a-nats-service/introduction/running
Wants=network-online.target
After=network-online.target

[Service]
Type=notify
NotifyAccess=main
User={settings.user}
Group={settings.user}
Environment=APPLIANCE_RUN_DIR={RUN_DIR}
ExecStart={settings.executable} run -c {settings.config_path}
ExecReload=/bin/kill -HUP $MAINPID
KillSignal=SIGUSR2
KillMode=mixed
TimeoutStartSec={TIMEOUT_START_SEC}s
TimeoutStopSec={TIMEOUT_STOP_SEC}s
WatchdogSec={WATCHDOG_SEC}s
Restart=on-failure
RestartSec=2s
LimitNOFILE={LIMIT_NOFILE}
StateDirectory=appliance
StateDirectoryMode=0750
RuntimeDirectory=appliance
RuntimeDirectoryMode=0755
LogsDirectory=appliance
LogsDirectoryMode=0750
ConfigurationDirectory=appliance
ConfigurationDirectoryMode=0750
{writable}UMask=0077

# Hardening (systemd-analyze security appliance.service)
CapabilityBoundingSet=
AmbientCapabilities=
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
PrivateUsers=yes
PrivateMounts=yes
ProtectHostname=yes
ProtectClock=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectProc=invisible
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
RemoveIPC=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources
SystemCallFilter=sched_setaffinity sched_getaffinity mbind
SystemCallErrorNumber=EPERM
DevicePolicy=closed
KeyringMode=private

[Install]
WantedBy=multi-user.target
"""


def render_sysusers(user: str = DEFAULT_USER) -> str:
    return f"""\
# appliance's system user (systemd-sysusers): no login, home in its state directory
u {user} - "appliance NATS server" {STATE_DIR} /usr/sbin/nologin
"""


def render_tmpfiles(user: str = DEFAULT_USER) -> str:
    return f"""\
# appliance's directories (systemd-tmpfiles); the unit's StateDirectory=/RuntimeDirectory= make them too
d {CONFIG_DIR} 0750 root {user} -
d {STATE_DIR} 0750 {user} {user} -
d {LOGS_DIR} 0750 {user} {user} -
"""
