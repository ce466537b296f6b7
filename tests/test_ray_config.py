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
