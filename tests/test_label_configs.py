"""The Label Studio configs of each kind: annotators read fields, never raw JSON, and every config keeps
the control names and choice values that `annotate pull` validates results against."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from cftools.judgments import ADJUDICATE, PURPOSES, VERIFY
from cftools.annotate.rules import render_label_config
from cftools.kinds import get_kind
from cftools.models import Item, SourceQuestion

# The task data each kind's push sends (issue 11); item_key, kind and group are for cftools, not shown.
# The configs here and `Kind.task_data` are written against this list.
HIDDEN_FIELDS = ("item_key", "kind", "group")
TASK_FIELDS = {
    "cfmm": (*HIDDEN_FIELDS, "check_flags", "image", "type", "basic_question", "basic_options", "question",
             "counterfactual_options", "proposed_answer", "needs_image_check"),
    "mucr": (*HIDDEN_FIELDS, "check_flags", "cause_image", "effect_image", "cause_caption", "effect_caption",
             "cue", "false_cues", "explanations"),
}
ADJUDICATION_FIELDS = ("judgment_1", "judgment_2")
KINDS_WITH_OWN_CONFIG = tuple(TASK_FIELDS)


# Fields a verification task shows that its adjudication task leaves out.
VERIFY_ONLY = {"cfmm": {"needs_image_check"}}


def shown_fields(kind: str, purpose: str) -> set[str]:
    fields = set(TASK_FIELDS[kind]) - set(HIDDEN_FIELDS)
    if purpose == ADJUDICATE:
        return (fields - VERIFY_ONLY.get(kind, set())) | set(ADJUDICATION_FIELDS)
    return fields


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
    """Every control of the C-VQA config, the same; a kind may ask more (CFMM: can the answer be determined?)."""
    own = answerable_controls(render_label_config(kind, purpose))
    for name, control in answerable_controls(render_label_config("cvqa", purpose)).items():
        assert own.get(name) == control, name


@pytest.mark.parametrize(("kind", "purpose"), CASES)
def test_every_control_points_at_an_element_of_its_config(kind, purpose):
    root = ET.fromstring(render_label_config(kind, purpose))
    names = {element.get("name") for element in root.iter() if element.get("name")}
    targets = {element.get("name"): element.get("toName") for element in root.iter() if element.get("toName")}
    assert targets and all(target in names for target in targets.values()), targets


@pytest.mark.parametrize(("kind", "purpose"), CASES)
def test_kind_config_shows_exactly_its_task_fields(kind, purpose):
    config = render_label_config(kind, purpose)
    assert data_variables(config) == shown_fields(kind, purpose)
    assert "details" not in data_variables(config)  # the JSON dump of item.data the C-VQA config shows
    assert not re.search(r"\{\{|\{%", config)  # fully rendered


def test_mucr_shows_cause_and_effect_side_by_side():
    root = ET.fromstring(render_label_config("mucr", VERIFY))
    pair = next(view for view in root.iter("View") if view.get("className") == "cf-pair")
    assert [image.get("name") for image in pair.iter("Image")] == ["cause_image", "effect_image"]
    assert ".cf-pair { display: flex;" in root.find("Style").text


EXAMPLE_DATA = {
    "cfmm": {"type": "color", "options": {"original": ["red", "blue"], "counterfactual": ["blue", "red"]}},
    "mucr": {"cause_image": "sha256:" + "a" * 64, "effect_image": "sha256:" + "b" * 64,
             "cause_caption": "A man looks at his phone while driving.", "effect_caption": "The car hit a post.",
             "cue": "phone", "false_cues": ["post", "wheel", "street"], "explanations": ["one", "two", "three"]},
}


@pytest.mark.parametrize("kind", KINDS_WITH_OWN_CONFIG)
def test_push_sends_every_field_the_config_shows(kind):
    """`Kind.task_data` (plus the check flags push adds) fills every $field of the kind's verify config, each
    with text or an image link rather than a JSON dump."""
    item = Item(key="k", kind=kind, group="color", question="If the bus were blue, what colour would it be?",
                answer="blue", data=EXAMPLE_DATA[kind])
    extra = {ref: f"/data/local-files/?d={ref[7:15]}.png" for ref in ("sha256:" + "a" * 64, "sha256:" + "b" * 64)}
    source = SourceQuestion(dataset="table:t", external_id="1", image_ref="bus.png", question="What colour is the bus?",
                            answer="red")
    data = {"check_flags": "none", **get_kind(kind).task_data(item, source, "/data/local-files/?d=x.png", extra)}
    shown = data_variables(render_label_config(kind, VERIFY))
    assert shown <= set(data), shown - set(data)
    assert all(isinstance(data[name], str) and data[name] and not data[name].startswith(("{", "["))
               for name in shown), {name: data[name] for name in shown}
    if kind == "cfmm":  # the correct option of each question is marked
        assert [line for line in data["basic_options"].splitlines() if "✓ correct" in line] == ["A. red  ✓ correct"]
        assert [line for line in data["counterfactual_options"].splitlines() if "✓ correct" in line] \
            == ["A. blue  ✓ correct"]
    else:  # the pair's own images, side by side
        assert (data["cause_image"], data["effect_image"]) == (extra["sha256:" + "a" * 64], extra["sha256:" + "b" * 64])


@pytest.mark.parametrize(("kind", "purpose"), CASES)
def test_label_studio_accepts_the_config(kind, purpose, label_studio):
    """The server validates a config when a project is made with it (names, toName targets, tags)."""
    project = label_studio.client().projects.create(title=f"config {kind} {purpose}",
                                                    label_config=render_label_config(kind, purpose))
    assert project.id
