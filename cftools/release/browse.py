"""`browse.html`: one static page per release to judge its items in (no server, no network, works from file://).

Each card shows the item's images large enough to check its answer against (click one to see it full size; a
MuCR pair's cause beside its effect; an item's released edits, `data.edited_image` and
`data.irrelevant_edited_image`, beside its original, captioned with the answer they must get, and an edit no person
verified labelled so on the image itself), its
fields as labelled text (nested data flattened to labels, never a JSON blob), each explanation as a paragraph of
its own, its check flags and the annotators' judgments.

The items are embedded in the page as one JSON document (characters that could end the script element are
escaped) and drawn a page at a time by a few lines of inline JavaScript, with DOM text nodes only (so no text from
the data is ever parsed as HTML): a release of 10,000 items opens as fast as one of ten. A search box matches ids
and text; selects filter by kind, group, split and status; cards keep the release's order (`source_order`: the
order the source files listed the items in, then the items made here by id).

Image paths are relative to the release folder. A format that renames its images (the C-VQA CSV names each by the
file name its input gave) leaves the content-addressed path empty: the page then points at the file of the same
SHA-256 in `images/`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from cftools.release.layout import IMAGES_DIR, data_image_paths, record_image_paths

if TYPE_CHECKING:
    from cftools.release.release import Release
from cftools.release.selection import source_order

BROWSE_NAME = "browse.html"
FACETS = ("kind", "group", "split", "status")
# data keys shown right after the questions, in this order, with these labels; the rest follow by name
DATA_ROWS = (("edited_answer", "answer about the edited image"),
             ("irrelevant_change", "irrelevant change"),
             ("irrelevant_edited_answer", "answer about the irrelevant edit"), ("cue", "cue"),
             ("false_cues", "false cues"),
             ("cue_choices", "cue choices"),
             ("cause_caption", "cause caption"), ("effect_caption", "effect caption"))
# shown first, in this order (an edit beside its original; a MuCR pair: cause beside effect)
FIRST_IMAGES = ("image", "edited", "irrelevant_edited", "cause", "effect")
# the captions of the released edits, and the label ON an unverified one (`--include-unverified-edits`)
EDIT_CAPTIONS = {"edited": "relevant edit — the answer becomes {answer}",
                 "irrelevant_edited": "irrelevant edit — the answer stays {answer}"}
UNVERIFIED_EDIT_LABEL = "edited — NOT verified by people"
PARAGRAPHS = {"explanations"}  # data keys whose list items are each a paragraph of prose
# forms of a row's value, read by the page's script
TEXT, LIST, PARAGRAPH, FLAG = "t", "l", "p", "f"
# what would end or open markup inside <script>: written as JSON escapes, which JSON.parse reads back unchanged
SCRIPT_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def image_label(where: str) -> str:
    """`image`, `cause_image`, `choices[2]` -> `image`, `cause`, `choices 3`: the caption under a picture."""
    label = where.replace("_image", "").replace("_", " ").replace(".", " · ")
    if label.endswith("]") and "[" in label:
        head, _, index = label[:-1].rpartition("[")
        label = f"{head} {int(index) + 1}" if index.isdigit() else label
    return label or "image"


def scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "" if value is None else str(value)


def flattened(value: Any, label: str) -> list[list[Any]]:
    """Rows [label, value, form] of a data value: nested objects become labels joined by ' · ', lists of plain
    values one list row; release image paths are left out (the pictures show them)."""
    if isinstance(value, dict):
        return [row for key in sorted(value) for row in flattened(value[key], f"{label} · {key}".replace("_", " "))]
    if isinstance(value, list):
        if all(not isinstance(v, (dict, list)) for v in value):
            shown = [scalar_text(v) for v in value if not data_image_paths(v)]
            return [[label, shown, LIST]] if shown else []
        return [row for n, v in enumerate(value, start=1) for row in flattened(v, f"{label} {n}")]
    if data_image_paths(value) or value in (None, ""):
        return []
    return [[label, scalar_text(value), TEXT]]


def judgment_text(annotation: dict[str, Any] | None) -> str | None:
    if not annotation:
        return None
    agreed = {True: "agreed", False: "disagreed", None: "fewer than two judgments"}[annotation.get("agreed")]
    return (f"{annotation.get('decision') or 'undecided'} ({annotation.get('judgments', 0)} judgments, {agreed}"
            f"{', adjudicated' if annotation.get('adjudicated') else ''})")


def item_rows(record: dict[str, Any], provenance: dict[str, Any]) -> list[list[Any]]:
    """The card's labelled fields, [label, value, form], in reading order."""
    data = dict(record.get("data") or {})
    rows: list[list[Any]] = []

    def add(label: str, value: Any, form: str = TEXT) -> None:
        if value in (None, "", [], {}):
            return
        if isinstance(value, list):  # a list is shown item by item: paragraphs, flags or a list
            rows.append([label, [scalar_text(v) for v in value], LIST if form == TEXT else form])
        else:
            rows.append([label, scalar_text(value), form])

    add("original question", record.get("original_question"))
    add("original answer", record.get("original_answer"))
    add("question", record.get("question"))
    add("answer", record.get("answer"))
    options = record.get("options") or {}
    add("original options", options.get("original"))
    add("options", options.get("counterfactual"))
    for key, label in DATA_ROWS:
        if not isinstance(data.get(key), dict):  # an object is flattened with the rest
            add(label, data.pop(key, None))
    for key in sorted(PARAGRAPHS & set(data)):
        value = data.pop(key)
        add(key, value if isinstance(value, list) else [value], PARAGRAPH)
    add("answer type", record.get("answer_type"))
    add("flags", provenance.get("check_flags"), FLAG)
    add("judgments", judgment_text(provenance.get("annotation")))
    add("corrected from", provenance.get("corrected_from"))
    generation = provenance.get("generation") or {}
    if generation:
        add("generated by", f"{generation.get('generator')} on {generation.get('backend')}:{generation.get('model')}")
    source = provenance.get("source") or {}
    add("source", " · ".join(str(source[k]) for k in ("dataset", "external_id") if source.get(k)) or None)
    for key in sorted(data):
        rows += flattened(data[key], key.replace("_", " "))
    return rows


def item_view(record: dict[str, Any], provenance: dict[str, Any], image_src: dict[str, str]) -> dict[str, Any]:
    """What the page draws of one item (short keys: a release of 10,000 items is one JSON document): its images as
    [caption, src, warning shown on the image ("" for none)], an edit beside its original."""
    from cftools.release.edited import EDIT_KINDS, edited_answer_of, edited_image_of

    data = record.get("data") or {}
    edits = {edited_image_of(record, edit): edit for edit in EDIT_KINDS if edited_image_of(record, edit)}
    images, roles = [], []
    for where, path in record_image_paths(record):
        edit = edits.get(path)
        if edit is None:
            images.append([image_label(where), image_src.get(path, path), ""])
            roles.append(where.removesuffix("_image") if where.endswith("_image") else where)
            continue
        caption = EDIT_CAPTIONS[edit.field].format(answer=edited_answer_of(record, edit) or "?")
        verified = bool(data.get(f"{edit.image}_verified"))
        images.append([caption, image_src.get(path, path), "" if verified else UNVERIFIED_EDIT_LABEL])
        roles.append(edit.field)
    order = sorted(range(len(images)), key=lambda n: FIRST_IMAGES.index(roles[n]) if roles[n] in FIRST_IMAGES
                   else len(FIRST_IMAGES))
    return {"id": str(record["id"]), **{f: scalar_text(record.get(f)) or "-" for f in FACETS},
            "verified": bool(record.get("verified")), "images": [images[n] for n in order],
            "rows": item_rows(record, provenance)}


def image_sources(folder: Path, records: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Content-addressed path -> the file the release holds it as, for the paths a format left empty (it renamed
    the file): found by hashing the other files under images/ (only when some path is missing)."""
    from cftools.images import sha256_file

    missing = {path for r in records for _, path in record_image_paths(r) if not (folder / path).is_file()}
    if not missing or not (folder / IMAGES_DIR).is_dir():
        return {}
    by_sha = {}
    for path in sorted(p for p in (folder / IMAGES_DIR).rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel not in missing:
            by_sha.setdefault(sha256_file(path), rel)
    return {path: by_sha[sha] for path in missing if (sha := Path(path).stem) in by_sha}


def packed(views: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The views as the page reads them, about half the bytes of the views themselves (a page of 10,000 items is
    read and parsed before the first card shows): each item an array [id, kind, group, split, status (indexes into
    `facets`), verified (0/1), images [[label index, path under images/, label index of the warning shown on it (only
    when there is one)]], rows [[label index, value, form (only
    when not plain text or a list)]]]; labels and facet values are listed once."""
    labels: dict[str, int] = {}
    facets: dict[str, dict[str, int]] = {f: {} for f in FACETS}

    def label(text: str) -> int:
        return labels.setdefault(text, len(labels))

    items = []
    for view in views:
        images = [[label(caption), path.removeprefix(f"{IMAGES_DIR}/")] + ([label(warning)] if warning else [])
                  for caption, path, warning in view["images"]]
        rows = [[label(name), value] + ([form] if form in (PARAGRAPH, FLAG) else [])
                for name, value, form in view["rows"]]
        items.append([view["id"], *(facets[f].setdefault(view[f], len(facets[f])) for f in FACETS),
                      int(view["verified"]), images, rows])
    return {"labels": list(labels), "facets": {f: list(values) for f, values in facets.items()}, "items": items}


def script_json(value: Any) -> Markup:
    """VALUE as JSON that can sit inside <script> (no `</script>`, no `<!--`), marked safe for the template."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char, escape in SCRIPT_ESCAPES.items():
        text = text.replace(char, escape)
    return Markup(text)


def render_browse(views: Sequence[dict[str, Any]], name: str, version: str, fmt: str) -> str:
    env = Environment(loader=PackageLoader("cftools.release", "."), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    return env.get_template("browse.html.j2").render(name=name, version=version, fmt=fmt, n_items=len(views),
                                                     items_json=script_json(packed(views)),
                                                     images_dir=IMAGES_DIR)


def write_browse(release: Release) -> None:
    """browse.html: every released item, its images and provenance, in one page."""
    ordered = sorted(release.items, key=source_order)
    sources = image_sources(release.folder, [e.record for e in ordered])
    views = [item_view(e.record, e.provenance, sources) for e in ordered]
    (release.folder / BROWSE_NAME).write_text(render_browse(views, release.name, release.version, release.format),
                                              encoding="utf-8")
