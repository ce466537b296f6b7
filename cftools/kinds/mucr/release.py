"""`cftools export NAME --version V --format mucr [--mucr-schema readme-2024-08-31|readme-2024-08-14|cause-effect]`:
a MuCR release.

The folder holds

    NAME.jsonl        one record per selected pair with exactly the schema's fields (SCHEMAS), image_0 = cause,
                      image_1 = effect; `label` is the pair's category; `link_id` names the other pairs of its group
                      as the README writes it, one string "[a,b,c]"
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
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from cftools.errors import CftoolsError, Hint

if TYPE_CHECKING:  # Pillow is imported where a composite is drawn: the kinds' registry loads this module
    import PIL.Image

# MuCR's record fields, named after where they are published. The repository (github.com/Zhiyuan-Li-John/MuCR)
# documents its JSONL under "Dataset Form" in README.md; that list changed once:
#   readme-2024-08-14  the README from 2024-08-14 to 08-30: no image fields
#   readme-2024-08-31  the README since 2024-08-31 (commit c8a3673): image_0 (cause) and image_1 (effect) added
#   cause-effect       a variant with `cause`/`effect` for the captions, named in the project's notes as a later
#                      form; it appears in no version of the repository, so its source is unconfirmed
SCHEMAS = {
    "readme-2024-08-31": ("id", "caption_0", "caption_1", "link_id", "cue", "false_cue", "style", "label",
                          "causal_reason", "image_0", "image_1"),
    "readme-2024-08-14": ("id", "caption_0", "caption_1", "link_id", "cue", "false_cue", "style", "label",
                          "causal_reason"),
    "cause-effect": ("id", "style", "cause", "effect", "cue", "false_cue", "label", "causal_reason", "image_0",
                     "image_1"),
}
DEFAULT_SCHEMA = "readme-2024-08-31"
# The names the schemas had before (v1 was called "MuCR's first release", which it is not).
SCHEMA_ALIASES = {"v1": "readme-2024-08-31", "v2": "cause-effect"}
# Where each field's value comes from (the data card lists it).
FIELD_SOURCES = {
    "id": "the item's key (an ingested MuCR record keeps its own id)",
    "caption_0": "the cause caption", "caption_1": "the effect caption",
    "cause": "the cause caption", "effect": "the effect caption",
    "link_id": 'the ids of the other pairs of its group, written as the README shows it: one string "[a,b,c]"',
    "cue": "the agreed cue", "false_cue": "the three false cues",
    "style": "photograph or comic", "label": "the pair's category (the README does not define label)",
    "causal_reason": "the three explanations by three people",
    "image_0": "the cause image, images/<sha256>", "image_1": "the effect image, images/<sha256>",
}


def schema_name(name: Optional[str]) -> str:
    """The schema NAME stands for (old names too); refuses an unknown one."""
    name = SCHEMA_ALIASES.get(str(name or DEFAULT_SCHEMA), str(name or DEFAULT_SCHEMA))
    if name not in SCHEMAS:
        raise CftoolsError(f"unknown MuCR schema {name!r}; choose one of {', '.join(SCHEMAS)}")
    return name


def link_id_text(ids: Sequence[str]) -> str:
    """link_id as the README writes it: `"link_id": "[a,b,c]"`, one string."""
    return "[" + ",".join(str(i) for i in ids) + "]"


def read_link_id(value: Any) -> list[str]:
    """The ids of a link_id: the README's string "[a,b,c]" (quotes and spaces tolerated) or a JSON list."""
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    text = str(value or "").strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return [part.strip().strip("'\"").strip() for part in text.split(",") if part.strip().strip("'\"").strip()]


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


def add_choice_sets(items: Sequence[Any], seed: int) -> None:
    """The C2E, E2C and Cue choice sets into the data of each selected pair of ITEMS (what `eval` asks), without
    the MuCR format's files; the same sets `--format mucr` draws with the same seed."""
    pairs = [entry for entry in items if keeps(entry.record)]
    sets = choice_sets(groups_of(pairs), seed)
    for entry in pairs:
        extra = {k: v for k, v in sets[entry.record["id"]].items() if v is not None}
        entry.record["data"] = {**entry.record["data"], **extra}


# ---------------------------------------------------------------- composites (input form 1)


def tile(path: Path, label: str) -> PIL.Image.Image:
    """The image fitted into a TILE square, with its label above it."""
    import PIL.Image
    import PIL.ImageDraw

    canvas = PIL.Image.new("RGB", (TILE, TILE + LABEL_HEIGHT), "white")
    with PIL.Image.open(path) as image:
        picture = image.convert("RGB")
    picture.thumbnail((TILE, TILE))
    canvas.paste(picture, ((TILE - picture.width) // 2, LABEL_HEIGHT + (TILE - picture.height) // 2))
    PIL.ImageDraw.Draw(canvas).text((6, 5), label, fill="black")
    return canvas


def composite(paths: list[Path], labels: list[str]) -> bytes:
    """The pictures side by side in one PNG (no clock time in it: the same pictures give the same bytes)."""
    import PIL.Image

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
    values = {"id": data.get("mucr_id") or entry.record["id"], "caption_0": data.get("cause_caption"), "caption_1": data.get("effect_caption"),
              "cause": data.get("cause_caption"), "effect": data.get("effect_caption"), "link_id": link_id_text(link_ids),
              "cue": data.get("cue"), "false_cue": list(data.get("false_cues") or []), "style": data.get("style"),
              "label": data.get("label") or data.get("category"), "causal_reason": list(data.get("explanations") or []),
              "image_0": data["cause_image"], "image_1": data["effect_image"]}
    return {field: values[field] for field in SCHEMAS[schema]}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_mucr(release: Any) -> None:
    """The MuCR release of the release's items (see the module's docstring); refuses small groups unless allowed."""
    from cftools.release.records import write_records
    from cftools.release.datacard import write_card

    items, folder, name, options = release.items, release.folder, release.name, release.options
    schema = schema_name(options.get("mucr_schema"))
    seed = int(options.get("mucr_seed") or 0)
    groups = groups_of(items)
    small = small_groups(groups)
    if small and not options.get("allow_small_groups"):
        raise CftoolsError(f"MuCR groups need {GROUP_SIZE} pairs (C2E/E2C choose among {GROUP_SIZE}); too small: "
                           f"{'; '.join(small)}", hint=Hint("{message}. Pass {allow} to release them with fewer "
                                                            "choices", allow="--allow-small-groups"))
    sets = choice_sets(groups, seed)
    rows, choices = [], []
    for key, members in groups.items():
        for entry in members:
            data = {**entry.record["data"], **{k: v for k, v in sets[entry.record["id"]].items() if v is not None}}
            data["composites"] = composites_of(folder, data)
            entry.record["data"] = data
            rows.append(mucr_record(entry, [(m.record["data"].get("mucr_id") or m.record["id"]) for m in members
                                            if m is not entry], schema))
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
    # The card lists no Parquet file (MuCR writes none) and, as it always has, no changes or annotators' sections.
    write_card(replace(release, items=ordered, splits={}, changes="", analysis=None),
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
        schema = schema_name(context.get("mucr_schema"))
        lines += [f"`{context['mucr_file']}` holds the records in MuCR's `{schema}` schema (see the cftools README "
                  "for where each schema is published). Each field and where its value comes from:", ""]
        lines += table(["field", "value"], [[f"`{f}`", FIELD_SOURCES[f]] for f in SCHEMAS[schema]])
        lines += ["", "Each question's composite image (input form 1) is in `images/` beside the split images "
                      "(form 3); `choices.jsonl` names them.", "",
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

