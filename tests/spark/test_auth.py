"""Credentials of the `jetstream` format against an `appliance run` with accounts (users with
passwords, a JetStream-enabled account and $SYS): the right user reads, a wrong password fails
with the server's words."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")

import nats  # noqa: E402

from appliance.testing.process import ApplianceProcess, free_port  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


async def _fill(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="SECRET", subjects=["secret.>"], allow_direct=True)
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
