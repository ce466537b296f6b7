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
    "cfmm": (*HIDDEN_FIELDS, "returned", "check_flags", "image", "type", "basic_question", "basic_options",
             "question", "counterfactual_options", "proposed_answer", "needs_image_check", "cf_choices"),
    "mucr": (*HIDDEN_FIELDS, "returned", "check_flags", "cause_image", "effect_image", "cause_caption",
             "effect_caption", "cue", "false_cues", "explanations"),
}
ADJUDICATION_FIELDS = ("judgment_1", "judgment_2")
KINDS_WITH_OWN_CONFIG = tuple(TASK_FIELDS)


# Fields a verification task shows that its adjudication task leaves out, and the other way round.
VERIFY_ONLY = {"cfmm": {"needs_image_check", "cf_choices"}}
# MuCR's adjudication shows the three people's explanations and cue sets of a cue-set disagreement (issue 32).
ADJUDICATE_ONLY = {"cfmm": {"cf_option_choices"}, "mucr": {"people_judgments", "cue_set_choices"}}
# Controls a kind asks in its own way: CFMM judges the basic and the counterfactual answer apart, the latter
# picked among the item's options (so a correction is always one of them).
OWN_CONTROLS = {("cfmm", VERIFY): {"answer_correct", "corrected_answer"}, ("cfmm", ADJUDICATE): {"corrected_answer"}}


def shown_fields(kind: str, purpose: str) -> set[str]:
    fields = set(TASK_FIELDS[kind]) - set(HIDDEN_FIELDS)
    if purpose == ADJUDICATE:
        return (fields - VERIFY_ONLY.get(kind, set())) | set(ADJUDICATION_FIELDS) | ADJUDICATE_ONLY.get(kind, set())
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
    """Every control of the C-VQA config, the same, but those a kind asks in its own way; a kind may ask more."""
    own = answerable_controls(render_label_config(kind, purpose))
    for name, control in answerable_controls(render_label_config("cvqa", purpose)).items():
        if name not in OWN_CONTROLS.get((kind, purpose), set()):
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
    data = {"check_flags": "none", "returned": "",
            **get_kind(kind).hooks.annotate.task_data(item, source, "/data/local-files/?d=x.png", extra)}
    shown = data_variables(render_label_config(kind, VERIFY))
    assert shown <= set(data), shown - set(data)
    choices = {name for name in shown if name.endswith("_choices")}  # Label Studio's dynamic choices: a list
    assert all(isinstance(data[name], str) and (data[name] or name == "returned")
               and not data[name].startswith(("{", "[")) for name in shown - choices), {n: data[n] for n in shown}
    assert all(isinstance(data[name], list) and all(set(c) == {"value"} for c in data[name]) for name in choices)
    if kind == "cfmm":  # the counterfactual answer is one of the item's options, or "cannot be determined"
        assert [c["value"] for c in data["cf_choices"]] == ["blue", "red", "cannot be determined"]
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


ALL_TASKS = [(kind, task) for kind in ("cvqa", "cfmm", "mucr") for task in get_kind(kind).hooks.annotate.tasks]


@pytest.mark.parametrize(("kind", "task"), ALL_TASKS)
def test_every_task_reads_in_plain_language(kind, task):
    """Choices read as words (the stored code is the alias), a required question's warning names it, and the
    project has instructions with what each answer means and a good and a bad example."""
    root = ET.fromstring(render_label_config(kind, task))
    for choice in root.iter("Choice"):
        assert "_" not in choice.get("value"), choice.get("value")
    header = ""
    for control in root.iter():
        if control.tag == "Header":
            header = control.get("value")
        if control.tag in ("Choices", "TextArea") and control.get("required") == "true":
            message = control.get("requiredMessage") or ""
            assert message.startswith("Please ") and len(message) > 20, (control.get("name"), message)
            number = re.match(r"\(\w+\)", header)  # the question as numbered on screen, not the control's name
            assert number is None or number.group(0) in message, (header, message)
    instructions = get_kind(kind).hooks.annotate.instructions(task)
    for part in ("What each answer means", "A good judgment", "A bad judgment"):
        assert part in instructions, (kind, task, part)


def test_select_offers_only_the_candidates_that_exist_numbered_as_shown():
    from cftools.kinds.mucr.annotate import select_payload

    candidates = {str(k): {"cause": f"sha256:c{k}", "effect": f"sha256:e{k}"} for k in (0, 1)}
    item = Item(key="p", kind="mucr", group="g", question="q", data={
        "candidates": {"photograph": candidates},
        "candidate_checks": {"photograph": [{"k": 1, "score": 0.9, "flags": []}, {"k": 0, "score": 0.5, "flags": []}]}})
    links = {f"sha256:{side}{k}": f"/data/local-files/?d={side}{k}.png" for side in "ce" for k in (0, 1)}
    data = select_payload("photograph", item, links)
    assert data["candidate_choices"] == [{"value": "1"}, {"value": "2"}] and data["candidate_keys"] == [1, 0]
    root = ET.fromstring(data["pairs"])
    pairs = [[img.get("src") for img in pair.iter("img")] for pair in root]
    assert pairs == [[links["sha256:c1"], links["sha256:e1"]], [links["sha256:c0"], links["sha256:e0"]]]
    assert [[cap.text for cap in pair.iter("figcaption")] for pair in root] == [["cause 1", "effect 1"],
                                                                                 ["cause 2", "effect 2"]]
    config = ET.fromstring(render_label_config("mucr", "select"))
    assert {c.get("name"): c.get("value") for c in config.iter("Choices")}["best_cause"] == "$candidate_choices"


@pytest.mark.parametrize(("kind", "task"), [case for case in ALL_TASKS if case not in CASES])
def test_label_studio_accepts_every_other_config(kind, task, label_studio):
    project = label_studio.client().projects.create(title=f"config {kind} {task}",
                                                    label_config=render_label_config(kind, task))
    assert project.id
