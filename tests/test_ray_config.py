"""[ray] of cftools.toml is read only with --ray: `address` is where --ray without a value connects (docs/ray.md,
docs/config.md). These runs never reach a cluster: a `ray://` address fails at once where Ray Client is not
installed (the line names the address asked for), and a run without --ray makes its calls here."""

import pytest

pytest.importorskip("ray")

CONFIGURED = "ray://127.0.0.1:9"


@pytest.fixture
def ray_configured(workspace):
    text = workspace.config_path.read_text(encoding="utf-8")
    workspace.config_path.write_text(text.replace("[ray]\n", f'[ray]\naddress = "{CONFIGURED}"\n', 1),
                                     encoding="utf-8")
    return workspace


def test_a_run_without_ray_stays_here_whatever_ray_address_says(ray_configured, run_cli):
    result = run_cli("generate", "rewrite", "--group", "boolean")
    assert result.exit_code == 0, result.output
    assert "Ray" not in result.output


def test_ray_without_a_value_connects_to_the_configured_address(ray_configured, run_cli):
    result = run_cli("generate", "rewrite", "--group", "boolean", "--ray")
    assert result.exit_code == 1
    assert f"cannot connect to the Ray cluster at {CONFIGURED}" in result.output


def test_an_address_on_the_command_line_wins_over_the_configured_one(ray_configured, run_cli):
    result = run_cli("generate", "rewrite", "--group", "boolean", "--ray", "ray://127.0.0.2:9")
    assert result.exit_code == 1
    assert "cannot connect to the Ray cluster at ray://127.0.0.2:9" in result.output


def test_an_address_where_nothing_listens_is_one_line_at_once(workspace):
    """ray.init retries an address where no cluster listens for minutes, printing only log lines: cftools asks the
    port first. The run is a separate process, bounded only so that a regression fails instead of hanging."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "cftools", "-w", str(workspace.root), "generate", "rewrite",
                           "--group", "boolean", "--ray", f"127.0.0.1:{port}"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"Error: cannot connect to the Ray cluster at 127.0.0.1:{port}: nothing answers on 127.0.0.1:{port}")


INHERITED = """
import os, sys
import ray
from cftools.distributed import LOCAL, connect
from cftools.workspace import load_workspace

load_workspace(sys.argv[1])
connect(LOCAL)  # no cluster runs here: ray.init starts one, a child of this process


@ray.remote(num_cpus=0)
def seen():
    return [name for name in ("PGPASSWORD", "CFTOOLS_TEST_STORE_PW", "CFTOOLS_TEST_OTHER") if os.environ.get(name)]


print(ray.get(seen.remote()), sorted(n for n in ("PGPASSWORD", "CFTOOLS_TEST_STORE_PW") if os.environ.get(n)))
ray.shutdown()
"""


def test_a_cluster_that_ray_starts_here_does_not_inherit_the_store_password(workspace):
    """docs/ray.md: the store's password never leaves the driver. A local cluster ray.init starts is the driver's
    child: its workers saw $PGPASSWORD and the [store] password_env variable; the driver keeps both."""
    import os
    import subprocess
    import sys

    text = workspace.config_path.read_text(encoding="utf-8")
    workspace.config_path.write_text(text.replace("[store]\n", '[store]\npassword_env = "CFTOOLS_TEST_STORE_PW"\n', 1),
                                     encoding="utf-8")
    env = {**os.environ, "PGPASSWORD": "pg-secret", "CFTOOLS_TEST_STORE_PW": "store-secret",
           "CFTOOLS_TEST_OTHER": "not-a-secret", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)  # a cluster of its own, started by ray.init
    done = subprocess.run([sys.executable, "-c", INHERITED, str(workspace.root)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['CFTOOLS_TEST_OTHER'] ['CFTOOLS_TEST_STORE_PW', 'PGPASSWORD']"
