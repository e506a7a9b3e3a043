"""Credentials and TLS of the `jetstream` format against `appliance run`: users with passwords
(a JetStream-enabled account and $SYS), a token, an NKey user, operator mode with a .creds file,
and client TLS (certificates made per run with trustme; a required client certificate). The right
identity reads, writes and reads as a stream; a wrong one fails with the server's words."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")

import nats  # noqa: E402

from appliance.testing.certs import TestCerts  # noqa: E402
from appliance.testing.jwts import Key, account_jwt, account_limits, creds, operator_jwt, user_jwt  # noqa: E402
from appliance.testing.process import ApplianceProcess, free_port  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


async def _fill(url: str, tls: ssl.SSLContext | None = None, **connect: object) -> None:
    nc = await nats.connect(url, tls=tls, allow_reconnect=False, connect_timeout=5, **connect)  # type: ignore[arg-type]
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="SECRET", subjects=["secret.>"], allow_direct=True)
    await js.add_stream(name="BACK", subjects=["back.>"], allow_direct=True, duplicate_window=60.0)
    for i in range(5):
        await js.publish("secret.x", b"%d" % i)
    await nc.close()


def test_user_password_and_a_wrong_password(spark, tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "auth.conf"
    config.write_text(f"""
listen: 127.0.0.1:{port}
jetstream {{ store_dir: {tmp_path / 'store'} }}
accounts {{
  $SYS {{ users = [ {{ user: admin, password: sys }} ] }}
  APP {{ jetstream: enabled, users = [ {{ user: app, password: "s3cret" }} ] }}
}}
""")
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path):
        url = f"nats://127.0.0.1:{port}"
        asyncio.run(_fill(f"nats://app:s3cret@127.0.0.1:{port}"))
        reader = spark.read.format("jetstream").option("url", url).option("stream", "SECRET")
        assert reader.option("user", "app").option("password", "s3cret").load().count() == 5
        assert spark.read.format("jetstream").option("url", f"nats://app:s3cret@127.0.0.1:{port}") \
            .option("stream", "SECRET").load().count() == 5
        with pytest.raises(Exception, match="Authorization Violation"):
            reader.option("user", "app").option("password", "wrong").load().count()


def test_token(spark, tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "token.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\njetstream {{ store_dir: {tmp_path / 'store'} }}\n"
                      "authorization { token: \"t0ken\" }\n")
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path):
        asyncio.run(_fill(f"nats://t0ken@127.0.0.1:{port}"))
        url = f"nats://127.0.0.1:{port}"
        reader = spark.read.format("jetstream").option("url", url).option("stream", "SECRET")
        assert reader.option("token", "t0ken").load().count() == 5
        with pytest.raises(Exception, match="Authorization Violation"):
            reader.option("token", "nope").load().count()


def _write_and_stream_back(spark, options: dict[str, str], checkpoint: Path) -> list[bytes]:  # type: ignore[no-untyped-def]
    """Write two rows to BACK with `options`, then read BACK as a stream (availableNow) into memory."""
    rows = spark.createDataFrame([("back.a", b"one"), ("back.b", b"two")], "subject string, data binary")
    writer = rows.write.format("jetstream").options(**options).option("writeId", "w1").mode("append")
    writer.save()
    writer.save()  # a re-run: deduplicated by Nats-Msg-Id over the same secured connection
    name = f"back_{checkpoint.name}"
    stream = spark.readStream.format("jetstream").options(**options).option("stream", "BACK").load()
    query = (stream.writeStream.format("memory").queryName(name).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    return sorted(bytes(r.data) for r in spark.sql(f"SELECT data FROM {name}").collect())


def test_nkey_user(spark, tmp_path: Path) -> None:
    user, stranger = Key.new("U"), Key.new("U")
    seed_file = tmp_path / "user.nk"
    seed_file.write_text(user.seed + "\n")
    port = free_port()
    config = tmp_path / "nkey.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\njetstream {{ store_dir: {tmp_path / 'store'} }}\n"
                      f"authorization {{ users = [ {{ nkey: {user.public} }} ] }}\n")
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path):
        url = f"nats://127.0.0.1:{port}"
        asyncio.run(_fill(url, nkeys_seed_str=user.seed))
        def reader():  # type: ignore[no-untyped-def]
            return spark.read.format("jetstream").option("url", url).option("stream", "SECRET")

        assert reader().option("nkeySeed", user.seed).load().count() == 5
        assert reader().option("nkeySeedFile", str(seed_file)).load().count() == 5
        options = {"url": url, "nkeySeedFile": str(seed_file)}
        assert _write_and_stream_back(spark, options, tmp_path / "ck_nkey") == [b"one", b"two"]
        with pytest.raises(Exception, match="Authorization Violation"):
            reader().option("nkeySeed", stranger.seed).load().count()
        with pytest.raises(Exception, match="Authorization Violation"):
            reader().load().count()  # no credentials at all


def test_operator_mode_creds_file(spark, tmp_path: Path) -> None:
    operator, system, account, user = Key.new("O"), Key.new("A"), Key.new("A"), Key.new("U")
    unknown_account = Key.new("A")
    preload = {
        system.public: account_jwt(system, operator, name="SYS"),
        account.public: account_jwt(account, operator, name="JS", limits=account_limits(
            mem_storage=1 << 20, disk_storage=64 << 20, streams=4, consumer=4)),
    }
    entries = "\n".join(f"  {key}: {token}" for key, token in preload.items())
    port = free_port()
    config = tmp_path / "operator.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\noperator: {operator_jwt(operator, system_account=system.public)}\n"
                      f"resolver: MEMORY\nresolver_preload: {{\n{entries}\n}}\n"
                      f"jetstream {{ store_dir: '{tmp_path / 'store'}' }}\n")
    good, bad = tmp_path / "app.creds", tmp_path / "stranger.creds"
    good.write_text(creds(user_jwt(user, account), user))
    bad.write_text(creds(user_jwt(user, unknown_account), user))
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path):
        url = f"nats://127.0.0.1:{port}"
        asyncio.run(_fill(url, user_credentials=str(good)))
        reader = spark.read.format("jetstream").option("url", url).option("stream", "SECRET")
        assert reader.option("credsFile", str(good)).load().count() == 5
        options = {"url": url, "credsFile": str(good)}
        assert _write_and_stream_back(spark, options, tmp_path / "ck_creds") == [b"one", b"two"]
        with pytest.raises(Exception, match="Authorization Violation"):
            reader.option("credsFile", str(bad)).load().count()


def test_tls_with_a_required_client_certificate(spark, tmp_path: Path) -> None:
    certs = TestCerts(tmp_path)
    client = certs.issue("client", "spark-client")
    stranger = certs.issue("stranger", "spark-client", ca=certs.other_ca)
    port = free_port()
    config = tmp_path / "tls.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\njetstream {{ store_dir: {tmp_path / 'store'} }}\n"
                      f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}", '
                      f'ca_file: "{certs.ca_file}", verify: true }}\n')
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path):
        url = f"tls://127.0.0.1:{port}"
        asyncio.run(_fill(url, certs.client_context(client)))
        options = {"url": url, "tlsCaFile": certs.ca_file, "tlsCertFile": client.cert, "tlsKeyFile": client.key}
        assert spark.read.format("jetstream").options(**options).option("stream", "SECRET").load().count() == 5
        # nats:// with TLS options: upgraded as well (the server requires TLS)
        plain_url = dict(options, url=f"nats://127.0.0.1:{port}")
        assert spark.read.format("jetstream").options(**plain_url).option("stream", "SECRET").load().count() == 5
        assert _write_and_stream_back(spark, options, tmp_path / "ck_tls") == [b"one", b"two"]
        reader = spark.read.format("jetstream").option("url", url).option("stream", "SECRET")
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):  # our CA not trusted
            reader.load().count()
        no_cert = reader.option("tlsCaFile", certs.ca_file)
        with pytest.raises(Exception, match="CERTIFICATE_REQUIRED|certificate required|TLS"):
            no_cert.load().count()
        with pytest.raises(Exception, match="UNKNOWN_CA|unknown ca|TLS"):  # a certificate of another CA
            no_cert.option("tlsCertFile", stranger.cert).option("tlsKeyFile", stranger.key).load().count()


def test_tls_handshake_first_connection(tmp_path: Path) -> None:
    """The tasks' client against a server with `handshake_first`: TLS before the INFO."""
    from appliance.spark.conn import Connection, TlsFiles

    certs = TestCerts(tmp_path)
    port = free_port()
    config = tmp_path / "first.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\n"
                      f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}", '
                      f'ca_file: "{certs.ca_file}", handshake_first: true }}\n')
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path):
        tls = TlsFiles(enabled=True, ca_file=certs.ca_file, handshake_first=True)
        with Connection(f"nats://127.0.0.1:{port}", tls=tls, timeout_s=10) as conn:
            assert conn.info["tls_required"] is True
            conn.subscribe("first.x")
            conn.publish("first.x", b"over tls")
            assert conn.next_frame(10).payload == b"over tls"
