"""`cftools eval --reading paper`: C-VQA replies read as the C-VQA repository's format_response.py and calc_acc.py
read them, so the published accuracies can be reproduced; and where cftools' strict reading differs.

The release is the shipped C-VQA-Real sample (300 rows), ingested and exported as a user would. A scripted
model answers every question in one of several answer shapes (a bare count, a negative count, two candidates,
"They would be the same.", a reply opening with "if", hedges, ...). The expected accuracies are computed here
from the CSV rows and a table of how the scripts read each shape (stated by hand from the scripts' rules, not by
calling cftools), per type, original and counterfactual, as calc_acc.py prints them (to 0.1).
"""

from __future__ import annotations

import csv
import hashlib
from collections import defaultdict

import pytest

from cftools.evaluate.run import EvalOptions, run_eval
from cftools.kinds.cvqa.scores import script_count, script_yes_no

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]

# count shapes: (reply for the value v, how the scripts read it); None = "fail"
COUNT_SHAPES = [
    (lambda v: f"{v}", lambda v: v),
    (lambda v: f"-{v}", lambda v: v),                          # the minus sign is not a word character
    (lambda v: f"{v} or {v + 1}", lambda v: v),                # two candidates: the first
    (lambda v: "They would be the same.", lambda v: None),     # no number in it
    (lambda v: f"There would be {WORDS[v]} birds.", lambda v: v),
    (lambda v: f"If two more came, {v}.", lambda v: v),        # read after the first comma
    (lambda v: f"{v} if the rest flew away", lambda v: v),     # read before "if"
    (lambda v: f"Maybe {v}.", lambda v: v),                    # a hedge: the scripts read the number
    (lambda v: f"{v}.5", lambda v: v),                         # "3.5" is 3 to the scripts
    (lambda v: "There are no birds.", lambda v: 0),
    (lambda v: "", lambda v: None),
]
# yes/no shapes: (reply for the answer a, how the scripts read it)
BOOL_SHAPES = [
    (lambda a: a, lambda a: a),
    (lambda a: a.capitalize() + ".", lambda a: a),
    (lambda a: "They would be the same.", lambda a: "yes"),                  # "be" reads as yes
    (lambda a: "Yes and no.", lambda a: "no"),                               # "no" wins
    (lambda a: "Not necessarily, but yes.", lambda a: "no"),
    (lambda a: "Maybe.", lambda a: None),
    (lambda a: "Isn't it?", lambda a: None),                                 # "isn" + "t": neither word
    (lambda a: "There is a bird." if a == "yes" else "There is not a bird.", lambda a: a),
]


def pick(text: str, n: int, salt: str = "") -> int:
    return int(hashlib.sha256((salt + text).encode()).hexdigest(), 16) % n


class ScriptedModel:
    """Answers a question from its text alone: the gold answer where the sample's text has one gold answer (else
    a value from the text's hash), in an answer shape chosen by the text's hash."""

    needs_image = False

    def __init__(self, rows):
        golds = defaultdict(set)
        for row in rows:
            golds[(row["query"], row["type"] == "boolean")].add(row["answer"])
            golds[(row["new query"], row["type"] == "boolean")].add(row["new answer"])
        self.golds = {key: next(iter(values)) for key, values in golds.items() if len(values) == 1}

    def answer(self, text: str, boolean: bool) -> tuple[str, object]:
        """(reply, how the scripts read it)."""
        known = self.golds.get((text, boolean))
        if boolean:
            value = known if known in ("yes", "no") else ("yes", "no")[pick(text, 2)]
            reply, script = BOOL_SHAPES[pick(text, len(BOOL_SHAPES), "shape")]
            return reply(value), script(value)
        value = int(known) if known and known.isdigit() and int(known) < 10 else pick(text, 6)
        reply, script = COUNT_SHAPES[pick(text, len(COUNT_SHAPES), "shape")]
        return reply(value), script(value)

    def generate(self, prompts):
        out = []
        for prompt in prompts:
            text = prompt.text.split("\n")[0]
            boolean = (text, True) in self.golds or not text.lower().startswith("how many")
            out.append(self.answer(text, boolean)[0])
        return out

    def score_options(self, prompts):
        raise AssertionError("generate mode only")

    def close(self):
        pass


def script_accuracies(rows, model) -> dict[str, dict[str, float]]:
    """calc_acc.py's figures for the scripted replies: per type, ori and cf accuracy (%, to 0.1) and the diff."""
    by_type = defaultdict(list)
    for row in rows:
        by_type[row["type"]].append(row)
    out = {}
    for cvqa_type, members in by_type.items():
        boolean = cvqa_type == "boolean"

        def right(query, gold):
            _, read = model.answer(query, boolean)
            return read is not None and str(read) == gold

        ori = 100 * sum(right(r["query"], r["answer"]) for r in members) / len(members)
        cf = 100 * sum(right(r["new query"], r["new answer"]) for r in members) / len(members)
        out[cvqa_type] = {"ori": round(ori, 1), "cf": round(cf, 1), "diff": round(ori - cf, 1)}
    return out


@pytest.fixture
def sample_release(workspace, peer_cvqa_real, tmp_path):
    from test_export import set_status

    from cftools.kinds.cvqa.ingest import ingest_cvqa
    from cftools.models import Item
    from cftools.release.export import ExportOptions, export_release
    from sqlalchemy import select

    ingest_cvqa(workspace.store, peer_cvqa_real, None, licence="CC-BY-4.0")
    with workspace.store.session() as session:
        keys = list(session.execute(select(Item.key)).scalars())
    set_status(workspace, "accepted", keys)
    release = export_release(workspace, "cvqa-sample", "1.0", tmp_path / "out",
                             options=ExportOptions(licence="CC-BY-4.0", kind_options={"allow_small_groups": True})).path
    with open(peer_cvqa_real, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return release, rows


def test_paper_reading_reproduces_the_c_vqa_scripts_accuracies(sample_release, tmp_path, run_cli):
    release, rows = sample_release
    model = ScriptedModel(rows)
    expected = script_accuracies(rows, model)
    result = run_eval(release, "blind",
                      options=EvalOptions(mode="generate", out_dir=tmp_path / "paper", reading="paper"), answerer=model)
    assert result.config["reading"] == "paper" and result.summary["answered"] == 2 * len(rows)
    got = {r["group"]: r for r in result.summary["cvqa"]["rows"]}
    for cvqa_type, group in (("direct", "numerical-direct"), ("indirect", "numerical-indirect"),
                             ("boolean", "boolean")):
        row = got[group]
        assert row["n"] == sum(r["type"] == cvqa_type for r in rows)
        assert round(100 * row["original"]["value"], 1) == expected[cvqa_type]["ori"], cvqa_type
        assert round(100 * row["counterfactual"]["value"], 1) == expected[cvqa_type]["cf"], cvqa_type
        assert round(100 * row["drop"]["value"], 1) == pytest.approx(expected[cvqa_type]["diff"], abs=0.051)

    # cftools' strict reading of the same replies scores lower: the report lists each question read otherwise
    strict = run_eval(release, "blind", options=EvalOptions(mode="generate", out_dir=tmp_path / "strict"),
                      answerer=model)
    assert strict.config["reading"] is None and "reading_differences" not in strict.summary
    paper_lines = {(p["id"], p["which"]): p for p in result.predictions}
    strict_lines = {(p["id"], p["which"]): p for p in strict.predictions}
    differing = {(d["id"], d["which"]): d for d in result.summary["reading_differences"]}
    assert differing and set(differing) == {key for key in paper_lines
                                            if (paper_lines[key]["parsed"], paper_lines[key]["correct"])
                                            != (strict_lines[key]["parsed"], strict_lines[key]["correct"])}
    raws = {d["raw"] for d in differing.values()}
    assert "They would be the same." in raws and any(r.startswith("-") for r in raws if r)
    assert any(" or " in r for r in raws if r) and "Yes and no." in raws
    assert strict.summary["cvqa"]["rows"][-1]["original"]["value"] < result.summary["cvqa"]["rows"][-1]["original"][
        "value"]
    report = (tmp_path / "paper" / "report.md").read_text(encoding="utf-8")
    assert "Where cftools' strict reading differs" in report and "read **the papers' way**" in report

    out = run_cli("eval", str(release), "--model", "blind", "--reading", "nonsense")
    assert out.exit_code == 2 and "--reading" in out.output


@pytest.mark.parametrize(("reply", "count"), [
    ("-4", 4), ("3 or 4", 3), ("They would be the same.", None), ("If 2 more came, 5.", 5), ("If 2 more came", None),
    ("5 if they stayed", 5), ("There are no birds", 0), ("3.5", 3), ("", None), ("twelve", None), ("ten", 10),
    ("1,000", 1), ("There would be two, or 3", 2),
    # non-ASCII decimal digits: the script's str.isdigit() and int() take them ("３" and "٣" are 3)
    ("３", 3), ("٣ birds", 3), ("There would be １２.", 12), ("² birds, 4", None),
])
def test_script_count_reading(reply, count):
    assert script_count(reply) == count


@pytest.mark.parametrize(("reply", "answer"), [
    ("Yes", "yes"), ("no", "no"), ("They would be the same.", "yes"), ("Yes and no.", "no"), ("Maybe.", None),
    ("It is not.", "no"), ("True", "yes"), ("Isn't it?", None), ("That's false", "no"),
])
def test_script_yes_no_reading(reply, answer):
    assert script_yes_no(reply) == answer
