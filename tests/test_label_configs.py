"""The Label Studio configs of each kind: annotators read fields, never raw JSON, and every config keeps
the control names and choice values that `annotate pull` validates results against."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from jinja2 import Environment, PackageLoader

from cftools.annotation_rules import (
    ADJUDICATE, CONTROLS, DECISION_CHOICES, FLAG_CHOICES, NO, PURPOSES, TEMPLATES, VERIFY, YES, render_label_config,
)

# The task data each kind's push sends (issue 11); item_key, kind and group are for cftools, not shown.
HIDDEN_FIELDS = ("item_key", "kind", "group")
TASK_FIELDS = {
    "cfmm": (*HIDDEN_FIELDS, "check_flags", "image", "type", "basic_question", "basic_options",
             "counterfactual_question", "counterfactual_options"),
    "mucr": (*HIDDEN_FIELDS, "check_flags", "cause_image", "effect_image", "cause_caption", "effect_caption",
             "cue", "false_cues", "explanations"),
}
ADJUDICATION_FIELDS = ("judgment_1", "judgment_2")
KINDS_WITH_OWN_CONFIG = tuple(TASK_FIELDS)


def render_kind_config(kind: str, purpose: str) -> str:
    """KIND's config rendered with the values render_label_config gives the C-VQA one.

    Until `annotate push --kind` picks `annotation/<kind>/<task>.xml.j2` itself, the tests render it here."""
    if kind == "cvqa":
        return render_label_config(purpose)
    env = Environment(loader=PackageLoader("cftools", "annotation"), keep_trailing_newline=True, autoescape=True)
    return env.get_template(f"{kind}/{TEMPLATES[purpose]}").render(
        yes_no=(YES, NO), flag_choices=FLAG_CHOICES, decision_choices=DECISION_CHOICES, **CONTROLS)


def shown_fields(kind: str, purpose: str) -> set[str]:
    fields = set(TASK_FIELDS[kind]) - set(HIDDEN_FIELDS)
    return fields | set(ADJUDICATION_FIELDS) if purpose == ADJUDICATE else fields


def answerable_controls(config: str) -> dict[str, tuple]:
    """name -> (tag, choice values, single?, required?) of each Choices and TextArea."""
    found = {}
    for element in ET.fromstring(config).iter():
        if element.tag in ("Choices", "TextArea"):
            found[element.get("name")] = (element.tag, sorted(c.get("value") for c in element.iter("Choice")),
                                          element.get("choice", "single"), element.get("required"))
    return found


def data_variables(config: str) -> set[str]:
    return {value[1:] for element in ET.fromstring(config).iter()
            for value in [element.get("value") or ""] if value.startswith("$")}


def text_elements(config: str) -> list[str]:
    """The task fields shown as text, in the order the annotator reads them."""
    return [element.get("value")[1:] for element in ET.fromstring(config).iter("Text")]


CASES = [(kind, purpose) for kind in KINDS_WITH_OWN_CONFIG for purpose in PURPOSES]


@pytest.mark.parametrize(("kind", "purpose"), CASES)
def test_kind_config_keeps_the_controls_pull_validates(kind, purpose):
    assert answerable_controls(render_kind_config(kind, purpose)) == answerable_controls(render_label_config(purpose))


@pytest.mark.parametrize(("kind", "purpose"), CASES)
def test_every_control_points_at_an_element_of_its_config(kind, purpose):
    root = ET.fromstring(render_kind_config(kind, purpose))
    names = {element.get("name") for element in root.iter() if element.get("name")}
    targets = {element.get("name"): element.get("toName") for element in root.iter() if element.get("toName")}
    assert targets and all(target in names for target in targets.values()), targets


@pytest.mark.parametrize(("kind", "purpose"), CASES)
def test_kind_config_shows_exactly_its_task_fields(kind, purpose):
    config = render_kind_config(kind, purpose)
    assert data_variables(config) == shown_fields(kind, purpose)
    assert "details" not in data_variables(config)  # the JSON dump of item.data the C-VQA config shows
    assert not re.search(r"\{\{|\{%", config)  # fully rendered


def test_mucr_shows_cause_and_effect_side_by_side():
    root = ET.fromstring(render_kind_config("mucr", VERIFY))
    pair = next(view for view in root.iter("View") if view.get("className") == "cf-pair")
    assert [image.get("name") for image in pair.iter("Image")] == ["cause_image", "effect_image"]
    assert ".cf-pair { display: flex;" in root.find("Style").text
