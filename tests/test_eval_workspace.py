"""A workspace that is named but cannot be read stops eval, verify, preflight and release diff with its error: it is
never taken for no workspace (eval would then ask api.openai.com with the user's key instead of the configured [llm]
base_url, verify would scan without the workspace's people and folders, release diff would say no run is stored)."""

from __future__ import annotations

from fixtures_eval import cvqa_record, png_bytes, write_release


def broken(workspace) -> None:
    """A cftools.toml with a key given twice: not valid TOML."""
    path = workspace.root / "cftools.toml"
    path.write_text(path.read_text(encoding="utf-8") + '\n[llm]\nbase_url = "http://127.0.0.1:9/v1"\n',
                    encoding="utf-8")


def test_a_broken_workspace_is_an_error_not_none(workspace, tmp_path, run_cli):
    """Before: each command ran as if there were no workspace, exit 0 for verify."""
    release = write_release(tmp_path / "bench-1.0", [cvqa_record(1, "numerical-direct", "2", "3", "number")],
                            {"cvqa-1": png_bytes(1)})
    assert run_cli("verify", release).exit_code == 0
    broken(workspace)
    for args in (["verify", release], ["preflight", release, "--plot", tmp_path / "p.png"],
                 ["eval", release, "--model", "openai:gpt-x", "--out", tmp_path / "run"],
                 ["eval", release, "--model", "hf:tiny", "--ray", "--out", tmp_path / "run"],
                 ["release", "diff", release, release]):
        result = run_cli(*args)
        assert result.exit_code != 0 and "not valid TOML" in result.output, (args, result.output)
    assert not (tmp_path / "run").exists()


def test_no_workspace_at_all_is_still_fine(tmp_path, run_cli, monkeypatch):
    monkeypatch.delenv("CFTOOLS_WORKSPACE", raising=False)
    monkeypatch.chdir(tmp_path)
    release = write_release(tmp_path / "bench-1.0", [cvqa_record(1, "numerical-direct", "2", "3", "number")],
                            {"cvqa-1": png_bytes(1)})
    assert run_cli("verify", release).exit_code == 0
