"""`appliance check-config FILE` — the `nats-server -t` of appliance — and the shipped example configs."""

from __future__ import annotations

from pathlib import Path

import bcrypt
from click.testing import CliRunner

from appliance.cli.main import main
from appliance.config import load_config

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "config").rglob("*.conf"))
SEED_PASSWORD = b"a very long s3cr3t! password"


def run_check(path: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["check-config", str(path)])
    return result.exit_code, result.stdout, result.stderr


def test_a_valid_file_passes_like_nats_server_t(tmp_path: Path) -> None:
    path = tmp_path / "ok.conf"
    path.write_text("port: 4222\n")
    assert run_check(path) == (0, f"configuration file {path} test is successful\n", "")


def test_every_problem_is_printed_one_per_line_and_the_exit_code_is_1(tmp_path: Path) -> None:
    path = tmp_path / "bad.conf"
    path.write_text("port: 4222\nfoo_bar: 1\nwrite_deadline: 2m\ntls {}\n")
    code, out, err = run_check(path)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f'appliance: {path}:3:17: invalid use of field "write_deadline": write_deadline should be converted to a duration',
        f'appliance: {path}:2:1: unknown field "foo_bar"',
        f"appliance: {path}:4:1: missing 'cert_file' in TLS configuration",
    ]


def test_a_missing_file_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    code, _, err = run_check(tmp_path / "missing.conf")
    assert code == 1 and "error opening config file" in err


def test_a_directory_is_a_problem_too(tmp_path: Path) -> None:
    code, _, err = run_check(tmp_path)
    assert code == 1 and err.startswith(f"appliance: {tmp_path}: error opening config file")


def test_the_example_configs_are_all_there() -> None:
    names = sorted(str(path.relative_to(REPO / "config")) for path in EXAMPLES)
    assert names == [
        "seed-cluster-sys/n1-c1.conf", "seed-cluster-sys/n2-c1.conf", "seed-cluster-sys/n3-c1.conf",
        "seed-cluster/n1-c1.conf", "seed-cluster/n2-c1.conf", "seed-cluster/n3-c1.conf", "standalone.conf",
    ]


def test_every_example_config_passes_check_config() -> None:
    for path in EXAMPLES:
        code, out, err = run_check(path)
        assert (code, err) == (0, ""), f"{path}: {err}"
        assert out.endswith("test is successful\n")


def test_the_seed_cluster_runs_on_one_machine_with_distinct_ports_and_mutual_routes() -> None:
    for variant in ("seed-cluster", "seed-cluster-sys"):
        nodes = [load_config(str(REPO / "config" / variant / f"n{i}-c1.conf"), env={}) for i in (1, 2, 3)]
        assert [n.server_name for n in nodes] == ["n1-c1", "n2-c1", "n3-c1"]
        assert [(n.host, n.port, n.http_port, n.cluster.port) for n in nodes] == [
            ("127.0.0.1", 4222, 8222, 6222), ("127.0.0.1", 4223, 8223, 6223), ("127.0.0.1", 4224, 8224, 6224),
        ]
        assert [n.jetstream.store_dir for n in nodes] == [f"/tmp/appliance/n{i}-c1" for i in (1, 2, 3)]
        for node in nodes:
            assert node.jetstream.enabled and node.cluster.name == "C1"
            peers = {int(route.rsplit(":", 1)[1]) for route in node.cluster.routes}
            assert peers == {6222, 6223, 6224} - {node.cluster.port}


def test_the_sys_variant_has_the_seeds_admin_with_a_cost_11_2a_bcrypt_password() -> None:
    for i in (1, 2, 3):
        options = load_config(str(REPO / "config" / "seed-cluster-sys" / f"n{i}-c1.conf"), env={})
        (admin,) = options.accounts["$SYS"].users
        assert (admin.username, admin.account) == ("admin", "$SYS")
        assert admin.password.startswith("$2a$11$")
        assert bcrypt.checkpw(SEED_PASSWORD, admin.password.encode())


def test_the_standalone_config_is_a_single_jetstream_server() -> None:
    options = load_config(str(REPO / "config" / "standalone.conf"), env={})
    assert options.jetstream.enabled and options.cluster.port == 0
    assert (options.host, options.port, options.http_port) == ("127.0.0.1", 4222, 8222)
