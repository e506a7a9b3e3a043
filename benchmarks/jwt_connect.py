"""JWT (operator mode) connection rate, side by side with nats-server (a benchmark, not a test).

    .venv/bin/python benchmarks/jwt_connect.py [--connects N] [--rounds R]

Both servers run the same config: an operator, a MEMORY resolver with preloaded system and account
JWTs. A round opens `connects` connections one after the other, each: TCP connect, INFO (nonce),
CONNECT with the user JWT and the nonce signed by the user's key, PING, PONG, close. Rows are the
median connections/s over the rounds, targets alternating every round. The client is Python
(one process): what it can push bounds both servers alike.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from appliance.testing.jwts import Key, account_jwt, operator_jwt, user_jwt
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess
from appliance.testing.rawjwt import exchange


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connects", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    operator, system, account, user = Key.new("O"), Key.new("A"), Key.new("A"), Key.new("U")
    conf_text = (f"operator: {operator_jwt(operator, system_account=system.public)}\nresolver: MEMORY\n"
                 f"resolver_preload: {{\n  {system.public}: {account_jwt(system, operator, name='SYS')}\n"
                 f"  {account.public}: {account_jwt(account, operator)}\n}}\n")
    token = user_jwt(user, account)
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "operator.conf"
        conf.write_text(conf_text)
        with NatsServer(["-c", str(conf)]) as real, \
                ApplianceProcess(["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"], log_dir=Path(tmp)) as ours:
            targets = {"nats-server": real.port, "appliance": ours.client_port}
            rates: dict[str, list[float]] = {name: [] for name in targets}
            for _ in range(args.rounds):
                for name, port in targets.items():
                    started = time.perf_counter()
                    for _ in range(args.connects):
                        if not exchange(port, token, user).answer.startswith(b"PONG"):
                            raise SystemExit(f"{name} refused the JWT user")
                    rates[name].append(args.connects / (time.perf_counter() - started))
    print(f"{'server':<12} {'JWT connects/s':>15}")
    for name, values in rates.items():
        print(f"{name:<12} {statistics.median(values):>15.0f}")
    print(f"ratio appliance/nats-server: {statistics.median(rates['appliance']) / statistics.median(rates['nats-server']):.2f}")


if __name__ == "__main__":
    main()
