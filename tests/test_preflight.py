"""`cftools preflight` and the paired test of `cftools eval compare` (issue 35): the power figures against a
simulation, the paired test against a published worked example, and the reviewer's checks on a release built like
the demo's and on four broken copies of it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from cftools.evaluate.paired import (Paired, clustered_bootstrap, clustered_mcnemar, mcnemar,
                                     minimum_detectable_difference, paired_test, power_of, weighted_cluster_size)
from cftools.release.licensing import licence_compatibility
from power_simulation import simulated_detection_rate

# -- the power figures against a simulation ------------------------------------------------------------------------


@pytest.mark.parametrize("sizes, psi, rho", [
    (np.ones(800, dtype=int), 0.42, 0.0),                       # one question per image: Connor's formula itself
    (np.resize(np.array([1, 2, 2, 4]), 300), 0.3, 0.3),         # images with 1-4 questions, correlated
])
def test_the_stated_mdd_is_detected_in_80_percent_of_simulated_releases(sizes, psi, rho):
    delta = minimum_detectable_difference(int(sizes.sum()), psi, rho, weighted_cluster_size(sizes))
    assert delta is not None and 0 < delta < psi
    assert power_of(delta, int(sizes.sum()), psi, rho, weighted_cluster_size(sizes)) == pytest.approx(0.8, abs=1e-4)
    rate = simulated_detection_rate(sizes, psi, rho, delta, reps=2000, seed=35)
    assert abs(rate - 0.80) <= 0.03, rate


def test_a_smaller_release_or_more_alike_questions_detect_less():
    assert minimum_detectable_difference(400, 0.4) > minimum_detectable_difference(1600, 0.4)
    assert minimum_detectable_difference(1000, 0.4, rho=0.5, m_w=3) > minimum_detectable_difference(1000, 0.4)
    assert minimum_detectable_difference(10, 0.05) is None  # nothing up to ψ itself reaches 80% power


# -- the paired test against a published worked example ---------------------------------------------------------------


def test_mcnemar_reproduces_agrestis_presidential_approval_example():
    """Agresti, Categorical Data Analysis (1990, p. 350; 2nd ed. §10.1): 1600 people asked twice whether they approve
    of the President: 794 approve/approve, 150 approve/disapprove, 86 disapprove/approve, 570 disapprove/disapprove.
    McNemar's z² = (86 − 150)² / (86 + 150) = 17.36 (the example of R's mcnemar.test, which cites it)."""
    result = mcnemar(86, 150)
    assert result["statistic"] == pytest.approx(17.36, abs=0.005)
    assert not result["exact"]
    assert result["p_value"] == pytest.approx(3.1e-5, rel=0.01)
    # The same people as paired questions, each their own cluster: the clustered test is McNemar's.
    first = [True] * 794 + [True] * 150 + [False] * 86 + [False] * 570
    second = [True] * 794 + [False] * 150 + [True] * 86 + [False] * 570
    pairs = Paired.of(first, second, [str(i) for i in range(1600)])
    assert clustered_mcnemar(pairs.difference, pairs.clusters)["statistic"] == pytest.approx(17.356, abs=0.001)
    assert paired_test(pairs, resamples=500)["difference"] == pytest.approx((86 - 150) / 1600)


def test_mcnemar_is_exact_with_few_discordant_pairs():
    from scipy.stats import binomtest

    result = mcnemar(2, 9)
    assert result["exact"] and result["p_value"] == pytest.approx(binomtest(2, 11, 0.5).pvalue)
    assert mcnemar(0, 0)["p_value"] == 1.0


def test_the_bootstrap_resamples_images_and_is_seeded():
    rng = np.random.default_rng(1)
    a, b = rng.random(600) < 0.45, rng.random(600) < 0.7
    images = [str(i // 3) for i in range(600)]
    pairs = Paired.of(a, b, images)
    first = clustered_bootstrap(pairs.difference, pairs.clusters, resamples=1000, seed=7)
    assert first == clustered_bootstrap(pairs.difference, pairs.clusters, resamples=1000, seed=7)
    assert first["low"] < first["difference"] < first["high"] and first["p_value"] < 0.05
    # copies of one image's questions are no new evidence: the same answers thrice over one image each are tighter
    spread = clustered_bootstrap(np.repeat(pairs.difference[::3], 3), np.arange(600), 1000, 7)
    lumped = clustered_bootstrap(np.repeat(pairs.difference[::3], 3), np.repeat(np.arange(200), 3), 1000, 7)
    assert lumped["high"] - lumped["low"] > spread["high"] - spread["low"]


@pytest.mark.parametrize("release, source, verdict", [
    ("CC-BY-4.0", "CC-BY-4.0", "compatible"), ("CC-BY-NC-4.0", "CC-BY-4.0", "compatible"),
    ("CC-BY-4.0", "CC-BY-NC-4.0", "incompatible"), ("CC-BY-4.0", "CC-BY-SA-4.0", "incompatible"),
    ("CC-BY-4.0", "MIT", "compatible"), ("CC-BY-4.0", "unknown", "unknown"), ("CC-BY-4.0", "my terms", "unknown"),
])
def test_licence_compatibility(release, source, verdict):
    assert licence_compatibility(release, source) == verdict


# -- preflight on a release built like the demo's, and on four broken copies ----------------------------------------

NAME, VERSION = "pre", "1.0"


@pytest.fixture(scope="module")
def exported(tmp_path_factory, peer_cvqa_real_path):
    """A workspace stocked with every kind (release_stock) and its native release, exported once for the module."""
    from release_stock import stock_every_kind

    from cftools.release.export import ExportOptions, export_release
    from cftools.workspace import init_workspace

    root = tmp_path_factory.mktemp("preflight")
    with pytest.MonkeyPatch.context() as patch:
        workspace = init_workspace(root / "ws")
        patch.setenv("CFTOOLS_WORKSPACE", str(workspace.root))
        stock_every_kind(workspace, peer_cvqa_real_path, root / "in")
        result = export_release(workspace, NAME, VERSION, root / "out",
                                options=ExportOptions(licence="CC-BY-4.0", kind_options={"allow_small_groups": True}))
        yield workspace, result.path
        workspace.close()


@pytest.fixture(scope="module")
def peer_cvqa_real_path():
    from conftest import CVQA_REAL

    if not CVQA_REAL.exists():
        pytest.fail(f"peer data not found at {CVQA_REAL} (set CFTOOLS_SHARED)")
    return CVQA_REAL


def write_run(folder: Path, release: Path, model: str, correct: dict[tuple[str, str], bool]) -> Path:
    """A run folder as `cftools eval` writes it, with scripted answers."""
    from cftools.release.layout import hash_file

    folder.mkdir(parents=True)
    config = {"model": model, "mode": "generate", "release": str(release), "release_name": release.name,
              "release_manifest_sha256": hash_file(release / "manifest.json"), "items": 0, "questions": len(correct)}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    lines = [{"id": i, "which": w, "kind": k, "group": g, "gold": "x", "raw": "x", "parsed": "x", "unknown": False,
              "correct": right} for (i, w, k, g), right in correct.items()]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return folder


def scripted_runs(release: Path, folder: Path) -> list[Path]:
    from cftools.release.layout import load_records
    from cftools.release.preflight import release_units

    units = release_units(release, load_records(release))
    rng = np.random.default_rng(3)
    keys = [(u.item, u.which, u.kind, u.group) for u in units]
    a = {k: bool(rng.random() < 0.5) for k in keys}
    b = {k: (not v) if rng.random() < 0.3 else v for k, v in a.items()}
    blind = {k: k[1] == "original" for k in keys}
    return [write_run(folder / "a", release, "hf:scripted-a", a), write_run(folder / "b", release, "hf:scripted-b", b),
            write_run(folder / "blind", release, "blind", blind)]


def test_preflight_passes_on_a_release_built_like_the_demos(exported, run_cli, tmp_path):
    from cftools.release.layout import load_records
    from cftools.release.preflight import preflight_figures, release_provenance
    from cftools.release.preflight_check import stored_runs

    workspace, release = exported
    card = (release / "README.md").read_text(encoding="utf-8")
    assert "## What this release can show" in card and "| cvqa | (all) |" in card  # written at export
    assert "rests on stated assumptions" in card  # no run of a release exists before it is written
    runs = scripted_runs(release, tmp_path / "runs")
    result = run_cli("preflight", release, *[x for run in runs for x in ("--run", run)], "--out", tmp_path / "r.md")
    assert result.exit_code == 0, result.output
    for name in ("croissant", "rai_fields", "licence", "sha256", "images"):
        assert f"| {name} | " in result.output
    assert "| fail |" not in result.output and "Every check passed" in result.output
    assert (tmp_path / "r.md").read_text(encoding="utf-8") == result.stdout  # the plot's path goes to stderr
    assert "store: first-round judgments" in result.output  # the stocked items' judgments, from the store
    assert f"runs `{Path(runs[0]).name}` and `{Path(runs[1]).name}`" in result.output  # by name: a report to share

    report = preflight_figures(release, load_records(release), release_provenance(release), workspace.store,
                               stored_runs(release, run_dirs=runs)).as_dict()
    assert report["pair"] == [str(runs[0]), str(runs[1])] and report["blind_run"] == str(runs[2])
    scopes = {(s["kind"], s["group"]): s for s in report["scopes"]}
    cvqa = scopes[("cvqa", "(all)")]
    assert cvqa["design"]["source"] == "runs" and cvqa["questions"] == 2 * cvqa["items"]
    assert cvqa["blind"]["accuracy"] == pytest.approx(0.5) and cvqa["blind"]["share_items_right"] == 0
    assert scopes[("cfmm", "(all)")]["chance"] == pytest.approx((1 / 2 + 1 / 4) / 2)  # 2 and 4 options shown
    ceiling = scopes[("cfmm", "(all)")]["ceiling"]  # 4 items, two judgments each, one of eight disagreeing
    assert (ceiling["agree"], ceiling["total"]) == (7, 8) and ceiling["low"] < 7 / 8 < ceiling["high"]


# -- the picture: the detectable difference against the number of items (issue 46) ----------------------------------

def test_the_mdd_curve_falls_with_the_items_and_passes_through_the_releases_own_point():
    from cftools.release.preflight import Scope, mdd_curve, scope_power

    for pair in (None, "runs"):
        scope = Scope("cvqa", "(all)", items=120, questions=240, images=100, m_w=1.4)
        if pair is None:
            scope_power(scope, [], None)
        else:  # a stored pair of runs' design, as scope_power writes it
            scope.design = {"source": "runs", "psi": 0.3, "rho": 0.1}
            from cftools.evaluate.paired import minimum_detectable_difference

            scope.mdd = minimum_detectable_difference(240, 0.3, 0.1, 1.4)
        curve = mdd_curve(scope)
        assert len(curve) >= 20 and curve[0].items <= 20 and curve[-1].items >= 1200  # undetectable sizes left out
        assert all(a.items < b.items and a.mdd > b.mdd for a, b in zip(curve, curve[1:]))  # more items, less MDD
        own = next(p for p in curve if p.items == scope.items)
        assert own.questions == scope.questions and own.mdd == pytest.approx(scope.mdd, abs=1e-9)
        assert all(p.questions == 2 * p.items for p in curve)  # two questions per item, as the release asks them


def test_preflight_draws_the_mdd_beside_the_release_and_verify_still_passes(exported, run_cli, tmp_path):
    from PIL import Image

    from cftools.release.preflight_plot import default_plot_path

    _, release = exported
    runs = scripted_runs(release, tmp_path / "runs")
    default = default_plot_path(release)
    default.unlink(missing_ok=True)
    result = run_cli("preflight", release, *[x for run in runs for x in ("--run", run)])
    assert result.exit_code == 0, result.output
    assert default.parent == release.resolve().parent  # beside the release folder, not in it
    assert f"MDD against the number of items drawn in {default}" in " ".join(result.stderr.split())
    with Image.open(default) as picture:
        assert picture.format == "PNG" and picture.size == (750, 450)
        assert len(set(picture.convert("RGB").getdata())) > 10  # curves and text drawn, not a blank canvas
    assert run_cli("verify", release).exit_code == 0  # the release folder holds no extra file

    chosen = tmp_path / "pictures" / "mdd.png"
    chosen.parent.mkdir()
    shown = run_cli("preflight", release, "--json", "--plot", chosen)
    assert json.loads(shown.stdout)["plot"] == str(chosen) and chosen.stat().st_size > 10_000
    inside = run_cli("preflight", release, "--plot", release / "mdd.png")
    assert inside.exit_code == 2 and "inside the release folder" in inside.output
    assert not (release / "mdd.png").exists()
    unwritable = run_cli("preflight", release, "--plot", tmp_path / "no-such-folder" / "mdd.png")
    assert unwritable.exit_code == 1
    assert unwritable.stderr.strip().splitlines()[-1].startswith("Error: the MDD plot could not be written to ")


def rewrite_manifest_entry(release: Path, rel: str) -> None:
    """Make the manifest agree with the file REL as it now is (a release whose maker shipped it so)."""
    manifest = json.loads((release / "manifest.json").read_text(encoding="utf-8"))
    for entry in manifest["files"]:
        if entry["path"] == rel:
            data = (release / rel).read_bytes()
            entry["sha256"], entry["size"] = hashlib.sha256(data).hexdigest(), len(data)
    (release / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def drop_rai_field(release: Path) -> None:
    doc = json.loads((release / "croissant.json").read_text(encoding="utf-8"))
    del doc["rai:dataLimitations"]
    (release / "croissant.json").write_text(json.dumps(doc), encoding="utf-8")
    rewrite_manifest_entry(release, "croissant.json")


def change_a_file(release: Path) -> None:
    with open(release / "README.md", "a", encoding="utf-8") as fh:
        fh.write("edited after export\n")


def break_an_image(release: Path) -> None:
    image = sorted((release / "images").iterdir())[0]
    image.write_bytes(image.read_bytes()[:40])  # a cut PNG: the header reads, the pixels do not
    rewrite_manifest_entry(release, f"images/{image.name}")


def stamp_an_incompatible_licence(release: Path) -> None:
    manifest = json.loads((release / "manifest.json").read_text(encoding="utf-8"))
    manifest["license"] = "CC-BY-4.0"
    manifest["source_licences"] = {**manifest["source_licences"], "vqa-nc": "CC-BY-NC-4.0"}
    (release / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


@pytest.fixture
def damaged(exported, tmp_path):
    """A copy of the exported release to damage."""
    return Path(shutil.copytree(exported[1], tmp_path / exported[1].name))


def test_preflight_fails_naming_a_check_that_failed(damaged, tmp_path, run_cli, monkeypatch):
    change_a_file(damaged)
    monkeypatch.delenv("CFTOOLS_WORKSPACE")  # the folder alone (a workspace named but missing is an error)
    monkeypatch.chdir(tmp_path)
    result = run_cli("preflight", damaged, "--json")
    assert result.exit_code == 1
    report = json.loads(result.output[:result.output.rindex("}") + 1])
    assert not report["ok"] and [c["name"] for c in report["checks"] if c["status"] == "fail"] == ["sha256"]
    assert "preflight failed: sha256 (changed: README.md" in result.output


@pytest.mark.parametrize("damage, check", [(drop_rai_field, "rai_fields"), (break_an_image, "images"),
                                           (stamp_an_incompatible_licence, "licence")])
def test_each_check_fails_on_its_damage(damaged, damage, check):
    from cftools.release import review
    from cftools.release.layout import load_manifest, load_records

    damage(damaged)
    checks = {"rai_fields": lambda: review.rai_check(damaged),
              "images": lambda: review.images_check(damaged, load_records(damaged)),
              "licence": lambda: review.licence_check(load_manifest(damaged))}
    found = checks[check]()
    assert (found.name, found.status) == (check, "fail"), found
    assert {"rai_fields": "rai:dataLimitations", "images": "images/", "licence": "vqa-nc (CC-BY-NC-4.0)"}[check] \
        in found.detail
    others = [c() for name, c in checks.items() if name != check]
    assert all(c.status != "fail" for c in others), others


def test_eval_compare_adds_the_paired_test(exported, tmp_path, run_cli):
    from cftools.evaluate.compare import compare_runs
    from cftools.evaluate.run import load_run

    _, release = exported
    a, b, _ = scripted_runs(release, tmp_path / "runs")
    result = run_cli("eval", "compare", a, b, "--resamples", "500")
    assert result.exit_code == 0, result.output
    assert "B - A" in result.output and "Paired test" in result.output and "clustered by image" in result.output
    comparison = compare_runs(load_run(a), load_run(b), resamples=500)
    overall = comparison["scopes"]["overall"]
    assert set(comparison["scopes"]) == {"overall", "cvqa", "cfmm", "mucr"}
    assert overall["n"] == comparison["shared"] and overall["mcnemar"]["b"] + overall["mcnemar"]["c"] > 0
    assert overall["within_mdd"] == (abs(overall["difference"]) < overall["mdd"])
    assert overall["images"] < overall["n"]  # two questions per C-VQA and CFMM image
