"""`cftools export NAME --version V --format mucr [--mucr-schema v1|v2]`: a MuCR release.

The folder holds

    NAME.jsonl        one record per selected pair with exactly MuCR's fields (SCHEMAS), image_0 = cause, image_1 =
                      effect; `label` is the pair's category; `link_id` lists the ids of the other pairs of its group
    choices.jsonl     per pair the choice sets every model sees: C2E (the right effect and the effects of the other
                      pairs of its group), E2C (the same for causes), Cue (the cue and its 3 false cues), positions
                      shuffled by the recorded seed (`--mucr-seed`, default 0)
    images/           the split images (input form 3) and, beside them, the composite of each question (form 1:
                      the pictures of a question in one image, made with Pillow), all named by their SHA-256
    records.jsonl     the native records with the choice sets and composites in `data` (what `cftools eval` and
                      `cftools ingest release` read)
    README.md         the data card, with a MuCR section (pairs per category and style, candidates per kept pair,
                      agreement of the select and explain tasks, the image models and seeds)
    manifest.json     every file's SHA-256 (`cftools verify`)

A group (pairs of one causality, per style) with fewer than 4 pairs is refused, naming it, unless
`--allow-small-groups` (then fewer choices, stated in the card).
"""

from __future__ import annotations

import hashlib
import io
import json
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Optional, Sequence

import PIL.Image
import PIL.ImageDraw

from cftools.errors import CftoolsError

SCHEMAS = {
    "v1": ("id", "caption_0", "caption_1", "link_id", "cue", "false_cue", "style", "label", "causal_reason",
           "image_0", "image_1"),
    "v2": ("id", "style", "cause", "effect", "cue", "false_cue", "label", "causal_reason", "image_0", "image_1"),
}
GROUP_SIZE = 4  # MuCR: a group of four pairs, so each choice is among 4
TILE = 256
LABEL_HEIGHT = 24
CHOICES_NAME = "choices.jsonl"


def keeps(record: dict) -> bool:
    """A selected pair (both images); caption pairs still without images are not MuCR records."""
    data = record.get("data") or {}
    return bool(data.get("cause_image") and data.get("effect_image"))


def group_of(record: dict) -> tuple[str, str]:
    return str(record.get("group") or ""), str((record.get("data") or {}).get("style") or "")


def group_name(key: tuple[str, str]) -> str:
    return f"{key[0]} ({key[1]})" if key[1] else key[0]


def groups_of(items: Sequence[Any]) -> dict[tuple[str, str], list[Any]]:
    groups: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for entry in sorted(items, key=lambda e: e.record["id"]):
        groups[group_of(entry.record)].append(entry)
    return dict(sorted(groups.items()))


def small_groups(groups: dict[tuple[str, str], list[Any]]) -> list[str]:
    return [f"{group_name(key)}: {len(members)} pairs" for key, members in groups.items() if len(members) < GROUP_SIZE]


# ---------------------------------------------------------------- choice sets


def choice_set(own: str, others: list[str], rng: random.Random) -> tuple[list[str], int]:
    """OWN among up to 3 of OTHERS (drawn when there are more), positions shuffled; returns (choices, answer)."""
    distractors = rng.sample(others, GROUP_SIZE - 1) if len(others) > GROUP_SIZE - 1 else list(others)
    choices = [own, *distractors]
    rng.shuffle(choices)
    return choices, choices.index(own)


def choice_sets(groups: dict[tuple[str, str], list[Any]], seed: int) -> dict[str, dict[str, Any]]:
    """Per record id: the C2E, E2C and Cue choice sets, each drawn from its own `Random(seed, id)`."""
    sets = {}
    for members in groups.values():
        for entry in members:
            data, record_id = entry.record["data"], entry.record["id"]
            rng = random.Random(f"{seed}:{record_id}")
            others = [m.record["data"] for m in members if m is not entry]
            c2e, c2e_answer = choice_set(data["effect_image"], [o["effect_image"] for o in others], rng)
            e2c, e2c_answer = choice_set(data["cause_image"], [o["cause_image"] for o in others], rng)
            cues = None
            if data.get("cue"):
                cues = [str(data["cue"]), *[str(c) for c in data.get("false_cues") or []]]
                rng.shuffle(cues)
            sets[record_id] = {"c2e_choices": c2e, "c2e_answer": c2e_answer, "e2c_choices": e2c,
                               "e2c_answer": e2c_answer, "cue_choices": cues, "choice_seed": seed}
    return sets


# ---------------------------------------------------------------- composites (input form 1)


def tile(path: Path, label: str) -> PIL.Image.Image:
    """The image fitted into a TILE square, with its label above it."""
    canvas = PIL.Image.new("RGB", (TILE, TILE + LABEL_HEIGHT), "white")
    with PIL.Image.open(path) as image:
        picture = image.convert("RGB")
    picture.thumbnail((TILE, TILE))
    canvas.paste(picture, ((TILE - picture.width) // 2, LABEL_HEIGHT + (TILE - picture.height) // 2))
    PIL.ImageDraw.Draw(canvas).text((6, 5), label, fill="black")
    return canvas


def composite(paths: list[Path], labels: list[str]) -> bytes:
    """The pictures side by side in one PNG (no clock time in it: the same pictures give the same bytes)."""
    tiles = [tile(p, label) for p, label in zip(paths, labels)]
    sheet = PIL.Image.new("RGB", (TILE * len(tiles), TILE + LABEL_HEIGHT), "white")
    for n, t in enumerate(tiles):
        sheet.paste(t, (n * TILE, 0))
    buffer = io.BytesIO()
    sheet.save(buffer, format="PNG")
    return buffer.getvalue()


def save_composite(folder: Path, blob: bytes) -> str:
    rel = f"images/{hashlib.sha256(blob).hexdigest()}.png"
    if not (folder / rel).exists():
        (folder / rel).write_bytes(blob)
    return rel


def composites_of(folder: Path, data: dict[str, Any]) -> dict[str, str]:
    """The form-1 image of each question: C2E and E2C (the given picture, then A-D), and the pair (Cue, Exp)."""
    letters = ["A", "B", "C", "D"]
    out = {}
    for task, first, given in (("c2e", "cause_image", "cause"), ("e2c", "effect_image", "effect")):
        choices = data[f"{task}_choices"]
        out[task] = save_composite(folder, composite([folder / data[first], *[folder / c for c in choices]],
                                                     [given, *letters[:len(choices)]]))
    out["pair"] = save_composite(folder, composite([folder / data["cause_image"], folder / data["effect_image"]],
                                                   ["first image (cause)", "second image (effect)"]))
    return out


# ---------------------------------------------------------------- records


def mucr_record(entry: Any, link_ids: list[str], schema: str) -> dict[str, Any]:
    data = entry.record["data"]
    values = {"id": entry.record["id"], "caption_0": data.get("cause_caption"), "caption_1": data.get("effect_caption"),
              "cause": data.get("cause_caption"), "effect": data.get("effect_caption"), "link_id": link_ids,
              "cue": data.get("cue"), "false_cue": list(data.get("false_cues") or []), "style": data.get("style"),
              "label": data.get("category"), "causal_reason": list(data.get("explanations") or []),
              "image_0": data["cause_image"], "image_1": data["effect_image"]}
    return {field: values[field] for field in SCHEMAS[schema]}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_mucr(items: list, folder: Path, name: str, splits: dict[str, float], context: Any) -> None:
    """The MuCR release of ITEMS (see the module's docstring); refuses small groups unless allowed."""
    from cftools.release.records import agreement_rows, write_records
    from cftools.release.datacard import write_card

    options = context.options
    schema = str(options.get("mucr_schema") or "v1")
    if schema not in SCHEMAS:
        raise CftoolsError(f"unknown MuCR schema {schema!r}; choose one of {', '.join(SCHEMAS)}")
    seed = int(options.get("mucr_seed") or 0)
    groups = groups_of(items)
    small = small_groups(groups)
    if small and not options.get("allow_small_groups"):
        raise CftoolsError(f"MuCR groups need {GROUP_SIZE} pairs (C2E/E2C choose among {GROUP_SIZE}); too small: "
                           f"{'; '.join(small)}. Pass --allow-small-groups to release them with fewer choices")
    sets = choice_sets(groups, seed)
    rows, choices = [], []
    for key, members in groups.items():
        for entry in members:
            data = {**entry.record["data"], **{k: v for k, v in sets[entry.record["id"]].items() if v is not None}}
            data["composites"] = composites_of(folder, data)
            entry.record["data"] = data
            rows.append(mucr_record(entry, [m.record["id"] for m in members if m is not entry], schema))
            choices.append({"id": entry.record["id"], "seed": seed,
                            "c2e": {"choices": data["c2e_choices"], "answer": data["c2e_answer"]},
                            "e2c": {"choices": data["e2c_choices"], "answer": data["e2c_answer"]},
                            "cue": {"choices": data.get("cue_choices"),
                                    "answer": (data["cue_choices"].index(data["cue"])
                                               if data.get("cue_choices") else None)},
                            "composites": data["composites"]})
    ordered = sorted(items, key=lambda e: e.record["id"])
    write_jsonl(folder / f"{name}.jsonl", sorted(rows, key=lambda r: r["id"]))
    write_jsonl(folder / CHOICES_NAME, sorted(choices, key=lambda r: r["id"]))
    write_records(ordered, folder / "records.jsonl")
    write_card(folder, [e.record for e in ordered], [e.provenance for e in ordered],
               agreement_rows(context.workspace.store, [e.record["id"] for e in ordered]), name=name,
               version=context.version,
               license=context.licensing.licence if context.licensing else None,
               license_given=bool(context.licensing and context.licensing.given),
               source_licences=context.licensing.card_rows() if context.licensing else None, splits=[],
               data_as_of=max((e.updated_at for e in ordered), default=""),
               kind_context={"mucr_schema": schema, "mucr_seed": seed, "small_groups": small,
                             "mucr_file": f"{name}.jsonl"})


# ---------------------------------------------------------------- the data card's MuCR section


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
            + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def image_makers(records: Sequence[dict]) -> list[list[Any]]:
    """(backend, model, seeds) of the chosen images, from their provenance."""
    made: dict[tuple[str, str], set] = defaultdict(set)
    for record in records:
        selection = (record.get("data") or {}).get("selection") or {}
        for side in ("cause_provenance", "effect_provenance"):
            prov = selection.get(side) or {}
            if prov:
                made[(str(prov.get("backend") or "?"), str(prov.get("model") or "?"))].add(prov.get("seed"))
    return [[backend, model, ", ".join(str(s) for s in sorted(seeds, key=str))]
            for (backend, model), seeds in sorted(made.items())]


def card_section(records: Sequence[dict], provenance: Sequence[dict], context: dict[str, Any]) -> list[str]:
    pairs = [r for r in records if keeps(r)]
    if not pairs:
        return []
    lines = ["## MuCR", ""]
    if context.get("mucr_file"):
        lines += [f"`{context['mucr_file']}` holds the records with MuCR's {context.get('mucr_schema')} fields "
                  f"({', '.join(SCHEMAS[context.get('mucr_schema') or 'v1'])}). `label` is the pair's category "
                  "(MuCR's README does not define it); `image_0` is the cause image and `image_1` the effect image; "
                  "`link_id` lists the other pairs of the group. Each question's composite image (input form 1) "
                  "is in `images/` beside the split images (form 3); `choices.jsonl` names them.", "",
                  f"Choice sets (C2E, E2C: the right image and the images of the other pairs of its group; Cue: the "
                  f"cue and its 3 false cues) were shuffled with seed {context.get('mucr_seed')}, so every model "
                  "sees the same question.", ""]
    if context.get("small_groups"):
        lines += ["**Small groups were released with `--allow-small-groups`: their questions have fewer than 4 "
                  "choices** (" + "; ".join(context["small_groups"]) + ").", ""]
    by = Counter(((r["data"].get("category") or "-"), (r["data"].get("style") or "-")) for r in pairs)
    lines += ["Pairs per category and style:", ""]
    lines += table(["category", "style", "pairs"], [[c, s, n] for (c, s), n in sorted(by.items())])
    generated = [((r["data"].get("selection") or {}).get("candidates"), (r["data"].get("selection") or {}).get("rounds"))
                 for r in pairs]
    known = [(n, rounds or 1) for n, rounds in generated if n]
    if known:
        per_pair = sum(n * rounds for n, rounds in known) / len(known)
        lines += ["", f"Candidates generated per kept pair and side: {per_pair:.1f} on average "
                      f"({len(known)} pairs; rounds of regeneration included)."]
    makers = image_makers(pairs)
    if makers:
        lines += ["", "Models and seeds that made the kept images:", ""]
        lines += table(["backend", "model", "seeds"], makers)
    agreement = [a for a in context.get("agreement") or [] if a["project"].split(" ")[-1] in ("select", "explain")]
    if agreement:
        lines += ["", "Agreement of the select and explain tasks (first two annotators of each task):", ""]
        lines += table(["task", "question", "pairs", "% agreement", "Cohen's kappa"],
                       [[a["project"], a["question"], a["n_pairs"], f"{a['percent_agreement']:.1f}",
                         "–" if a["cohen_kappa"] is None else f"{a['cohen_kappa']:.3f}"] for a in agreement])
    accepted = sum(1 for r in pairs if r.get("verified"))
    lines += ["", f"{accepted} of {len(pairs)} pairs have three explanations from three different people and an "
                  "agreed cue set; the others are unverified drafts."]
    return lines

