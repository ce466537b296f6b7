"""Library errors say what went wrong without naming a command-line option; the `Hint` they carry names it, and the
CLI's one line is the text people always read."""

from __future__ import annotations

import importlib.util

import pytest

from cftools.errors import CftoolsError, Hint, InputError, WorkspaceError
from cftools.kinds.cfmm.generate import parse_quota
from cftools.workspace import find_workspace

from conftest import ROOT


def code_shape():
    spec = importlib.util.spec_from_file_location("code_shape", ROOT / "bench" / "code_shape.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_library_error_names_a_command_line_option():
    shape = code_shape()
    assert {"--force", "--kind", "--images", "--max-cost", "--allow-small-groups"} <= shape.declared_options()
    assert shape.options_in_errors() == []


def test_the_cli_line_is_the_message_with_its_hint(tmp_path, monkeypatch, run_cli):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CFTOOLS_WORKSPACE", raising=False)
    with pytest.raises(WorkspaceError) as caught:
        find_workspace()
    assert caught.value.message == f"no cftools workspace here ({tmp_path})"
    assert caught.value.hint.options == {"workspace": "--workspace"}
    result = run_cli("status")
    assert result.exit_code == 1
    assert (f"Error: no cftools workspace here ({tmp_path}): pass --workspace DIR, set CFTOOLS_WORKSPACE, or create "
            "one with 'cftools init DIR'") == " ".join(result.output.split())


def test_an_option_at_the_front_of_the_line():
    with pytest.raises(CftoolsError) as caught:
        parse_quota("count=1,color=x")
    assert caught.value.message == "'color=x' is not TYPE=SHARE (a number)"
    assert str(caught.value) == "--types: 'color=x' is not TYPE=SHARE (a number)"


def test_the_message_is_put_in_as_it_is():
    error = CftoolsError("a {force} and {message} of a file name",
                         hint=Hint("{message}; pass {force}", force="--force"))
    assert str(error) == "a {force} and {message} of a file name; pass --force"


def test_an_input_errors_hint_follows_its_reason():
    error = InputError("data.csv", "the stored text differs", "line 3",
                       hint=Hint("{message}; pass {update} to replace it", update="--update"))
    assert str(error) == "data.csv, line 3: the stored text differs; pass --update to replace it"
    assert error.message == "data.csv, line 3: the stored text differs"
    assert error.reason == "the stored text differs; pass --update to replace it"  # as it is raised again
