"""`appliance run` as a process: what a user of nats-server sees."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import bcrypt
import nats
import pytest

from appliance.testing.process import ApplianceProcess, free_port
from appliance.testing.rawclient import RawClient

pytestmark = pytest.mark.integration


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))  # type: ignore[arg-type]


def test_flags_serve_nats_py_and_monitoring(tmp_path: Path) -> None:
    port, http = free_port(), free_port()
    with ApplianceProcess(["-a", "127.0.0.1", "-p", str(port), "-m", str(http), "-n", "n1"], log_dir=tmp_path) as app:
        log = app.log()
        assert f"Listening for client connections on 127.0.0.1:{port}" in log
        assert log.index("Listening for client connections") < log.index("Server is ready")

        async def scenario() -> None:
            nc = await nats.connect(f"nats://127.0.0.1:{port}", name="itest")
            sub = await nc.subscribe("greet.*")
            await nc.publish("greet.joe", b"hello")
            assert (await sub.next_msg(timeout=5)).data == b"hello"
            varz = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=5).read())
            assert varz["server_name"] == "n1" and varz["port"] == port and varz["connections"] == 1
            connz = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http}/connz?subs=1", timeout=5).read())
            assert connz["connections"][0]["name"] == "itest"
            assert connz["connections"][0]["subscriptions_list"] == ["greet.*"]
            subsz = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http}/subsz", timeout=5).read())
            assert subsz["num_subscriptions"] >= 1
            health = urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=5)
            assert health.status == 200 and json.loads(health.read()) == {"status": "ok"}
            await nc.close()
        run(scenario())
        app.signal(signal.SIGTERM)
        assert app.wait() == 0


def test_garbage_client_gets_err_while_others_are_served(tmp_path: Path) -> None:
    port = free_port()
    with ApplianceProcess(["-a", "127.0.0.1", "-p", str(port)], log_dir=tmp_path):
        async def scenario() -> None:
            nc = await nats.connect(f"nats://127.0.0.1:{port}")
            sub = await nc.subscribe("ok")
            bad = RawClient(port)
            try:
                bad.send(b"CONNECT {}\r\nGARBAGE\r\n")
                assert bad.read_to_close() == b"+OK\r\n-ERR 'Unknown Protocol Operation'\r\n"
            finally:
                bad.close()
            await nc.publish("ok", b"still serving")
            assert (await sub.next_msg(timeout=5)).data == b"still serving"
            await nc.close()
        run(scenario())


def test_config_file_with_bcrypt_system_user_and_permissions(tmp_path: Path) -> None:
    port = free_port()
    hashed = bcrypt.hashpw(b"a very long s3cr3t! password", bcrypt.gensalt(rounds=4)).decode()
    config = tmp_path / "server.conf"
    config.write_text(f"""
server_name=auth-test
listen=127.0.0.1:{port}
accounts {{
  $SYS {{ users = [ {{ user: "admin", pass: "{hashed}" }} ] }}
  APP {{ users = [ {{ user: app, password: app, permissions: {{ publish: "app.>", subscribe: ["app.>", "_INBOX.>"] }} }} ] }}
}}
""")
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path):
        async def scenario() -> None:
            admin = await nats.connect(f"nats://127.0.0.1:{port}", user="admin",
                                       password="a very long s3cr3t! password")
            await admin.flush()
            await admin.close()
            app = await nats.connect(f"nats://app:app@127.0.0.1:{port}")
            sub = await app.subscribe("app.x")
            await app.publish("app.x", b"1")
            assert (await sub.next_msg(timeout=5)).data == b"1"
            await app.close()
        run(scenario())
        denied = RawClient(port)
        try:
            denied.send(b'CONNECT {"verbose":false,"user":"admin","pass":"wrong"}\r\n')
            assert denied.read_to_close() == b"-ERR 'Authorization Violation'\r\n"
        finally:
            denied.close()
        violator = RawClient(port)
        try:
            violator.send(b'CONNECT {"verbose":false,"user":"app","pass":"app"}\r\nPUB other 0\r\n\r\nPING\r\n')
            assert violator.read_until(b"PONG\r\n") == b"-ERR 'Permissions Violation for Publish to \"other\"'\r\nPONG\r\n"
        finally:
            violator.close()


def test_max_payload_from_config(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "small.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\nmax_payload: 1KB\n")
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path):
        client = RawClient(port)
        try:
            assert client.info["max_payload"] == 1024
            client.send(b'CONNECT {"verbose":false}\r\nPUB x 1025\r\n')
            assert client.read_to_close() == b"-ERR 'Maximum Payload Violation'\r\n"
        finally:
            client.close()


def test_lame_duck_mode_on_sigusr2(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "ldm.conf"
    config.write_text(f'listen: 127.0.0.1:{port}\nlame_duck_duration: "30s"\nlame_duck_grace_period: "1s"\n')
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path) as app:
        client = RawClient(port, timeout_s=10)
        try:
            client.send(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
            client.read_until(b"PONG\r\n")
            app.signal(signal.SIGUSR2)
            info = client.read_until(b'"ldm":true')
            assert b"INFO " in info
            client.read_to_close()
        finally:
            client.close()
        app.signal(signal.SIGTERM)
        assert app.wait() == 0


def test_bad_config_lists_every_problem_and_exits_1(tmp_path: Path) -> None:
    config = tmp_path / "bad.conf"
    config.write_text("port: 4222\nfoo_bar: 1\nmax_payload: nope\n")
    done = subprocess.run([sys.executable, "-m", "appliance", "run", "-c", str(config)], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1
    assert "bad.conf:2:1" in done.stderr and "foo_bar" in done.stderr
    assert "bad.conf:3" in done.stderr


def test_version_and_unsupported_workers(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "appliance", "run", "--version"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0 and "2.15.1" in done.stdout


def test_trace_flag_logs_client_operations(tmp_path: Path) -> None:
    port = free_port()
    with ApplianceProcess(["-a", "127.0.0.1", "-p", str(port), "-DV"], log_dir=tmp_path) as app:
        client = RawClient(port)
        try:
            client.send(b'CONNECT {"verbose":false}\r\nSUB traced.x 7\r\nPING\r\n')
            client.read_until(b"PONG\r\n")
        finally:
            client.close()
        log = app.wait_log("<<- [SUB traced.x  7]")
        assert "[TRC]" in log and "<<- [PING]" in log
