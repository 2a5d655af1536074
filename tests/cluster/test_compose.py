"""docs/cluster/compose.yaml: the documented deployment parses and its lich config validates.

Docker is not run here; what can be checked without it is: the file's shape,
that every lich service mounts the config it names and shares the install's
key, that the commands are ones ``lich`` accepts, that the numbers agree
(P against the workers' concurrency, Postgres connections against the pools,
health check ports), and ``lich config validate`` on the mounted config with
each service's environment.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from lich_env import lich_env

from lich.gateway.command import gateway_command
from lich.nats_bus.command import worker_command
from lich.nats_bus.settings import parse_listen

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "docs" / "cluster"
COMPOSE = HERE / "compose.yaml"
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-?][^}]*)?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return data


def lich_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose["services"].items() if name in ("gateway", "worker")}


def interpolate(value: str) -> str:
    """What compose makes of ``${VAR:?message}``, with a stand-in for each variable."""
    return _VARIABLE.sub(lambda m: f"stand-in-{m.group(1).lower()}", value)


def mounted_config(service: dict[str, Any]) -> tuple[Path, str]:
    """The host file mounted as the service's ``--config``, and where it is mounted."""
    command = service["command"]
    target = command[command.index("--config") + 1]
    for volume in service["volumes"]:
        source, _, rest = volume.partition(":")
        if rest.split(":")[0] == target:
            return (HERE / source).resolve(), target
    raise AssertionError(f"--config {target} is not mounted: {service['volumes']}")


def lich_config(service: dict[str, Any]) -> dict[str, Any]:
    path, _ = mounted_config(service)
    return tomllib.loads(path.read_text(encoding="utf-8"))


def test_the_services_are_a_broker_a_database_an_ingress_and_three_workers(
    compose: dict[str, Any],
):
    assert set(compose["services"]) == {"nats", "postgres", "gateway", "worker"}
    nats = compose["services"]["nats"]
    assert "-js" in nats["command"]  # JetStream on
    store = nats["command"][nats["command"].index("-sd") + 1]
    assert any(v.endswith(f":{store}") for v in nats["volumes"])  # kept across restarts
    assert compose["services"]["worker"]["deploy"]["replicas"] == 3
    assert compose["services"]["gateway"].get("deploy", {}).get("replicas", 1) == 1
    for name, service in lich_services(compose).items():
        assert service["command"][0] == name
        assert set(service["depends_on"]) == {"nats", "postgres"}
        build = service["build"]
        dockerfile = (HERE / build["context"] / build["dockerfile"]).resolve()
        assert dockerfile == HERE / "Dockerfile"


def test_every_lich_service_mounts_one_config_and_shares_the_install_key(
    compose: dict[str, Any],
):
    configs = set()
    for service in lich_services(compose).values():
        path, _ = mounted_config(service)
        assert path == HERE / "lich.toml"
        configs.add(path)
        session_dir = lich_config(service)["session_dir"]
        shared = [v for v in service["volumes"] if v.split(":")[1] == session_dir]
        # A named volume (not a host path): the same for every replica.
        assert len(shared) == 1
        assert shared[0].split(":")[0] in compose["volumes"]
    assert len(configs) == 1


def test_the_commands_are_ones_lich_accepts(compose: dict[str, Any]):
    commands = {"gateway": gateway_command, "worker": worker_command}
    for name, service in lich_services(compose).items():
        # Parsed as the command line would be (options, types, ranges), not run.
        ctx = commands[name].make_context(name, list(service["command"][1:]))
        assert ctx.params is not None


@pytest.mark.parametrize("name", ["gateway", "worker"])
def test_the_mounted_config_validates_with_the_services_environment(
    compose: dict[str, Any], name: str, tmp_path: Path,
):
    service = compose["services"][name]
    env = {k: interpolate(str(v)) for k, v in service["environment"].items()}
    path, _ = mounted_config(service)
    result = subprocess.run(
        [sys.executable, "-m", "lich", "--config", str(path), "config", "validate"],
        cwd=tmp_path, env=lich_env(tmp_path, **env), capture_output=True, text=True,
        timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: ")
    config = lich_config(service)
    keys = {p["api_key_env"] for p in config["providers"]}
    # Every secret the config names is in the environment compose gives the service,
    # but the ingress runs no model: the provider's key is the workers' alone.
    named = {config["session_store"]["dsn_env"]}
    if name == "gateway":
        named.add(config["gateway"]["webhook"].get("token_env", "LICH_GATEWAY_TOKEN"))
        assert not keys & set(env)
        warnings = [line for line in result.stderr.splitlines() if "warning" in line]
        assert all("missing API key" in line for line in warnings), result.stderr
    else:
        named |= keys
        assert "warning" not in result.stderr, result.stderr
    assert named <= set(env)


def test_the_numbers_agree(compose: dict[str, Any]):
    services = compose["services"]
    config = lich_config(services["worker"])
    bus, store = config["bus"], config["session_store"]
    # The broker and the database are the compose services, on their default ports.
    assert [urlsplit(s).netloc for s in bus["servers"]] == ["nats:4222"]
    dsn = interpolate(services["worker"]["environment"][store["dsn_env"]])
    assert urlsplit(dsn).hostname == "postgres"
    # P at least the runs the workers take at once (docs/cluster.md, choosing P).
    command = services["worker"]["command"]
    concurrency = int(command[command.index("--concurrency") + 1])
    replicas = services["worker"]["deploy"]["replicas"]
    assert bus["partitions"] >= concurrency * replicas
    # Each lich process holds pool_size + 2 connections.
    processes = replicas + 1
    postgres = services["postgres"]["command"]
    max_connections = int(next(a.split("=", 1)[1] for a in postgres
                               if a.startswith("max_connections=")))
    assert (store["pool_size"] + 2) * processes <= max_connections
    # The health checks ask the ports lich serves.
    _, health_port = parse_listen(bus["health_listen"])
    assert f"127.0.0.1:{health_port}/readyz" in " ".join(services["worker"]["healthcheck"]["test"])
    webhook_port = config["gateway"]["webhook"]["port"]
    assert f"127.0.0.1:{webhook_port}/health" in " ".join(
        services["gateway"]["healthcheck"]["test"])
    assert services["gateway"]["ports"] == [f"127.0.0.1:{webhook_port}:{webhook_port}"]
    # SIGTERM's grace period fits in the time compose waits before SIGKILL.
    grace = config["gateway"]["grace_s"]
    assert int(services["worker"]["stop_grace_period"].removesuffix("s")) > grace


def test_the_image_installs_extras_that_exist():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = set(pyproject["project"]["optional-dependencies"])
    dockerfile = (HERE / "Dockerfile").read_text(encoding="utf-8")
    wanted = re.search(r"pip install [^\n]*'\.\[([a-z,]+)\]'", dockerfile)
    assert wanted is not None
    assert set(wanted.group(1).split(",")) <= extras
    assert {"gateway", "nats", "postgres"} <= set(wanted.group(1).split(","))


def _compose_command_lines(compose: dict[str, Any]) -> list[list[str]]:
    """Every ``lich`` command line the deployment runs or tells the operator to run
    (the services' commands and the header's ``exec`` line), as given."""
    lines = [list(s["command"]) for s in lich_services(compose).values()]
    for line in COMPOSE.read_text(encoding="utf-8").splitlines():
        if " exec " in line and " lich " in line:
            lines.append(line.split(" lich ", 1)[1].split())
    return lines


def test_the_exact_command_lines_reach_their_commands(compose: dict[str, Any], tmp_path: Path):
    # The config flag after the command name (`worker --config FILE`) chooses the plugins
    # that add the command: it must be found, not sent to the model as a task.
    path, target = mounted_config(compose["services"]["worker"])
    lines = _compose_command_lines(compose)
    assert len(lines) == 3
    for line in lines:
        args = [str(path) if a == target else a for a in line]
        command = [a for a in line if not a.startswith("-") and a != target][:2]
        if command[0] != "cluster":
            command = command[:1]
        result = subprocess.run(
            [sys.executable, "-m", "lich", *args, "--help"], cwd=tmp_path,
            env=lich_env(tmp_path), capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"Usage: lich {' '.join(command)} "), result.stdout
