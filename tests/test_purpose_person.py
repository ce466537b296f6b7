"""The two values of the annotate stage that were strings (issue 47): a task's `Purpose`, parsed once from the
string the store keeps and written back the same, and a `Person`, whose pseudonym is the one releases carry."""

from __future__ import annotations

import pytest

from cftools.annotate.purpose import Purpose
from cftools.boundary import workspace_boundary, workspace_key
from cftools.errors import CftoolsError
from cftools.person import Person


@pytest.mark.parametrize("stored, task, unit", [("verify", "verify", ""), ("adjudicate", "adjudicate", ""),
                                                 ("select:photo", "select", "photo"), ("edit:1", "edit", "1"),
                                                 ("edit:irrelevant:2", "edit", "irrelevant:2")])
def test_a_stored_purpose_parses_into_task_and_unit_and_writes_back_the_same_string(stored, task, unit):
    purpose = Purpose.parse(stored)
    assert (purpose.task, purpose.unit) == (task, unit)
    assert str(purpose) == stored and Purpose.parse(str(purpose)) == purpose
    assert {purpose: 1}[Purpose(task, unit)] == 1  # a dictionary key, as the steps of push and pull use it


@pytest.mark.parametrize("malformed", ["", ":photo", "edit:", "edit: 1", "two words", " verify"])
def test_a_malformed_purpose_is_one_clear_error_naming_it(malformed):
    with pytest.raises(CftoolsError) as raised:
        Purpose.parse(malformed)
    assert str(raised.value).startswith(f"malformed task purpose {malformed!r}: expected TASK or TASK:UNIT")


def test_a_measuring_purpose_shows_as_a_verification_in_the_verification_project():
    for measuring in ("control", "audit"):
        purpose = Purpose.parse(measuring)
        assert purpose.measuring and purpose.shown == Purpose("verify") and purpose.project == Purpose("verify")
    select = Purpose.parse("select:photo")
    assert not select.measuring and select.shown == select and select.project == Purpose("select")


def test_a_purpose_compared_with_a_string_is_an_error_not_a_silent_false():
    with pytest.raises(TypeError):
        assert Purpose("verify") == "verify"


def test_a_persons_pseudonym_is_the_one_a_release_names_them_by(workspace):
    email = "Maria.Gonzalez@uni-example.edu"
    person = Person(email)
    assert str(person) == email.lower() and person == Person(email.lower())
    released = workspace_boundary(workspace).released({"verification": {"annotators": [email]}, "by": email})
    pseudonym = person.pseudonym(workspace_key(workspace.root))
    assert released == {"verification": {"annotators": [pseudonym]}, "by": pseudonym}
    assert pseudonym.startswith("annotator-") and "maria" not in pseudonym

