"""`croissant.json`: the release described in Croissant 1.1 with its Responsible-AI (RAI 1.0) fields.

Core: the dataset's name, version, licence and the `[release]` fields people give in cftools.toml; a
`distribution` listing every file of the release with the SHA-256 the manifest has too; record sets per file that
holds records (`records.jsonl` for every kind together, and one record set per kind with its own `data` fields; a
peer format's own CSV/JSONL files) and one for the images.

RAI: what cftools recorded while it made the release is written out, never invented:
`rai:dataCollection` (origins, source datasets and their licences, the generators), `rai:dataAnnotationProtocol`
(two annotators per item, adjudication of disagreements, the kinds' own tasks), `rai:dataAnnotationPlatform`
(Label Studio), `rai:dataAnnotationAnalysis` (inter-annotator agreement of the released items),
`rai:annotationsPerItem` (the judgments the released items received; absent when none was annotated),
`rai:dataLimitations` (unverified items, items without any image, check flags), `rai:hasSyntheticData`,
`rai:machineAnnotationTools` (the models that drafted, cftools' automatic checks), `rai:dataCollectionTimeframe`
(the items' first creation and last change in the store), `rai:dataPreprocessingProtocol` (each ingest: format,
file, records read and skipped), `prov:wasDerivedFrom` (the source datasets, their licences and ingested files)
and `prov:wasGeneratedBy` (one activity per generator, backend, model and prompt template, and the annotation).
What only people know (use cases, biases, personal information, annotator demographics, maintenance, authors,
citation) comes from `[release]` in cftools.toml (RELEASE_FIELDS); export warns, naming them, when the texts of
PEOPLE_ONLY are empty.

`license` is the SPDX URL of a licence with an SPDX id, the licence itself when it is a URL, else absent (an
unknown or free-text licence is named in `rai:dataCollection`, never turned into a URL that does not exist).

Per-kind record sets must return only their kind's rows, and Croissant has no row filter: a release whose
records.jsonl holds several kinds gets `kinds/<kind>.jsonl` too (the same lines, one file per kind), which the
per-kind record sets read.

The file is written before the manifest (which then lists it) and after every other file (which it lists).
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import dataclass, field as dataclass_field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from cftools.release.layout import IMAGES_DIR, RECORDS_NAME, hash_file, load_manifest, record_image_paths

if TYPE_CHECKING:
    from cftools.release.release import Release

CROISSANT_NAME = "croissant.json"
CROISSANT_1_1 = "http://mlcommons.org/croissant/1.1"
RAI_1_0 = "http://mlcommons.org/croissant/RAI/1.0"
ANNOTATION_PLATFORM = "Label Studio (self-hosted), driven by cftools annotate push/pull"

# The JSON-LD context of Croissant 1.1 (the spec's standard context) plus the RAI and PROV-O prefixes.
CONTEXT: dict[str, Any] = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "sc": "https://schema.org/",
    "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "prov": "http://www.w3.org/ns/prov#",
    "dct": "http://purl.org/dc/terms/",
    "arrayShape": "cr:arrayShape",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "containedIn": "cr:containedIn",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileObject": "cr:fileObject",
    "fileProperty": "cr:fileProperty",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isArray": "cr:isArray",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "parentField": "cr:parentField",
    "path": "cr:path",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "samplingRate": "cr:samplingRate",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
}

# [release] keys in cftools.toml -> the Croissant property they fill (what only people know).
RELEASE_FIELDS = {
    "description": "description",
    "url": "url",
    "cite_as": "citeAs",
    "keywords": "keywords",
    "data_use_cases": "rai:dataUseCases",
    "data_biases": "rai:dataBiases",
    "data_limitations": "rai:dataLimitations",
    "personal_sensitive_information": "rai:personalSensitiveInformation",
    "data_social_impact": "rai:dataSocialImpact",
    "annotator_demographics": "rai:annotatorDemographics",
    "data_release_maintenance_plan": "rai:dataReleaseMaintenancePlan",
    "data_collection": "rai:dataCollection",
}
# The RAI texts no store can know: export warns, naming them, when [release] leaves them empty.
PEOPLE_ONLY = {"data_biases": "rai:dataBiases", "data_use_cases": "rai:dataUseCases",
               "personal_sensitive_information": "rai:personalSensitiveInformation",
               "data_social_impact": "rai:dataSocialImpact"}
KINDS_DIR = "kinds"  # kinds/<kind>.jsonl: one kind's lines of records.jsonl, for its record set
SPDX_URL = "https://spdx.org/licenses/{}.html"
CREATORS_KEY = "creators"  # [release] creators = ["Name <email>", ...] or [{name=..., url=...}]

MEDIA_TYPES = {".jsonl": "application/jsonlines", ".json": "application/json", ".csv": "text/csv",
               ".parquet": "application/x-parquet", ".md": "text/markdown", ".html": "text/html",
               ".tsv": "text/tab-separated-values", ".yaml": "application/yaml", ".py": "text/x-python",
               ".png": "image/png", ".jpg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp",
               ".bmp": "image/bmp", ".tif": "image/tiff"}
IMAGE_TYPES = {"png": "image/png", "jpg": "image/jpeg", "gif": "image/gif", "webp": "image/webp",
               "bmp": "image/bmp", "tif": "image/tiff"}

# The shared record fields (cftools.release.layout.RECORD_FIELDS) and their Croissant types.
RECORD_FIELD_TYPES = {
    "id": "sc:Text", "kind": "sc:Text", "group": "sc:Text", "split": "sc:Text", "verified": "sc:Boolean",
    "status": "sc:Text", "image": "sc:Text", "image_sha256": "sc:Text", "original_question": "sc:Text",
    "original_answer": "sc:Text", "answer_type": "sc:Text", "question": "sc:Text", "answer": "sc:Text",
}
RECORD_FIELD_TEXT = {
    "id": "The item's id (unique in the release).",
    "kind": "The benchmark shape: cvqa, cfmm or mucr.",
    "group": "The item's group (C-VQA question type, CFMM type, MuCR category).",
    "split": "The split the item is in.",
    "verified": "True when annotators accepted the item.",
    "status": "The item's status in the store when it was released.",
    "image": "The item's image, a path relative to the release folder (images/<sha256>.<ext>), or null.",
    "image_sha256": "The SHA-256 of the item's image.",
    "original_question": "The question before the counterfactual rewrite.",
    "original_answer": "The gold answer of the original question.",
    "answer_type": "number, yes/no or other.",
    "question": "The counterfactual question.",
    "answer": "The gold answer of the counterfactual question.",
}
# The per-item account of its verification (records' `verification` object), one field each.
VERIFICATION_FIELDS = (
    ("people", "sc:Integer", False, "How many different people judged the item."),
    ("annotators", "sc:Text", True, "The pseudonymous ids of the people who judged it (keyed; no emails)."),
    ("separate_servers", "sc:Boolean", False, "True when each person judged it on a Label Studio server that "
                                              "cftools proved distinct (no other person's token accepted there)."),
    ("how", "sc:Text", False, "'separate servers', 'separate servers not proven: not blind', 'shared server: not "
                              "blind' or 'not annotated'."),
    ("blind", "sc:Boolean", False, "True only when cftools proved, for every judgment, that its server was its "
                                   "person's alone (its only user, no other person's token accepted, a document "
                                   "root with images only): no one could see another person's judgment."),
    ("why_not_blind", "sc:Text", False, "Why the item was not blind, in words that name no one; empty when blind."),
)


# ---------------------------------------------------------------- core


def media_type(path: str) -> str:
    return MEDIA_TYPES.get(Path(path).suffix.lower(), "application/octet-stream")


def file_objects(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One cr:FileObject per file of the release but the images (their file set lists those), with its SHA-256."""
    out = []
    for entry in entries:
        if entry["path"].startswith(f"{IMAGES_DIR}/"):
            continue
        out.append({"@type": "cr:FileObject", "@id": entry["path"], "name": entry["path"],
                    "contentUrl": entry["path"], "contentSize": f"{entry['size']} B",
                    "encodingFormat": media_type(entry["path"]), "sha256": entry["sha256"]})
    return out


def image_file_sets(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The images as one cr:FileSet per file type (images/*.png, ...). Their SHA-256s are their file names."""
    types = sorted({Path(e["path"]).suffix.lstrip(".") for e in entries if e["path"].startswith(f"{IMAGES_DIR}/")})
    return [{"@type": "cr:FileSet", "@id": f"images-{ext}", "name": f"images-{ext}",
             "description": "Images named by the SHA-256 of their bytes.",
             "encodingFormat": IMAGE_TYPES.get(ext, "application/octet-stream"), "includes": f"{IMAGES_DIR}/*.{ext}"}
            for ext in types]


def plain_id(text: str) -> str:
    """An @id part mlcroissant takes (no whitespace): other characters than letters, digits, . _ - become _."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)


def column_field(record_set: str, name: str, file_id: str, data_type: str = "sc:Text",
                 description: str | None = None, json_path: str | None = None, column: str | None = None) -> dict:
    source: dict[str, Any] = {"fileObject": {"@id": file_id}, "extract": {"column": column or name}}
    if json_path:
        source["transform"] = {"jsonPath": json_path}
    field: dict[str, Any] = {"@type": "cr:Field", "@id": f"{record_set}/{plain_id(name)}", "name": name,
                             "dataType": data_type, "source": source}
    if description:
        field["description"] = description
    return field


def records_record_set(file_id: str = RECORDS_NAME) -> dict[str, Any]:
    """Every item, its shared fields (the kind's own are in the per-kind record sets)."""
    fields = [column_field("records", name, file_id, data_type, RECORD_FIELD_TEXT[name])
              for name, data_type in RECORD_FIELD_TYPES.items()]
    for name, data_type, array, text in VERIFICATION_FIELDS:
        field = column_field("records", f"verification_{name}", file_id, data_type, text, json_path=name,
                             column="verification")
        if array:
            field["isArray"] = True
        fields.append(field)
    return {"@type": "cr:RecordSet", "@id": "records", "name": "records", "key": {"@id": "records/id"},
            "description": "Every item of the release, one per line of records.jsonl.", "field": fields}


def value_type(values: Sequence[Any]) -> tuple[str, bool] | None:
    """(Croissant data type, is an array) of a `data` field's values; None for nested objects (they stay in
    records.jsonl's `data` only)."""
    present = [v for v in values if v is not None]
    array = bool(present) and all(isinstance(v, list) for v in present)
    scalars = [x for v in present for x in (v if array else [v])]
    if any(isinstance(x, (dict, list)) for x in scalars) or (not array and any(isinstance(v, list) for v in present)):
        return None
    if scalars and all(isinstance(x, bool) for x in scalars):
        return "sc:Boolean", array
    if scalars and all(isinstance(x, int) and not isinstance(x, bool) for x in scalars):
        return "sc:Integer", array
    if scalars and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in scalars):
        return "sc:Float", array
    return "sc:Text", array


def kind_record_set(kind: str, records: Sequence[dict], file_id: str = RECORDS_NAME) -> dict[str, Any] | None:
    """The fields of one kind's items, read from FILE_ID (which holds that kind's rows only): the id and the kind's
    own `data` fields that hold values or lists of values."""
    set_id = f"{kind}_data"
    mine = [r for r in records if r.get("kind") == kind]
    fields = [column_field(set_id, "id", file_id, description="The item's id (records/id).")]
    from cftools.release.edited import field_descriptions

    described = field_descriptions()
    for name in sorted({k for r in mine for k in (r.get("data") or {})}):
        typed = value_type([(r.get("data") or {}).get(name) for r in mine])
        if typed is None:
            continue
        field = column_field(set_id, name, file_id, typed[0], described.get(name, f"data.{name} of a {kind} item."),
                             json_path=name, column="data")
        if typed[1]:
            field["isArray"] = True
        fields.append(field)
    if len(fields) == 1:
        return None
    return {"@type": "cr:RecordSet", "@id": set_id, "name": set_id, "field": fields,
            "description": f"The {kind} items' own fields (their `data` in records.jsonl; nested objects are only "
                           "there)."}


def images_record_set(file_sets: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for file_set in file_sets:
        set_id = f"{file_set['@id']}_files"
        out.append({"@type": "cr:RecordSet", "@id": set_id, "name": set_id,
                    "description": "The image files; an item names its image by this path.",
                    "field": [{"@type": "cr:Field", "@id": f"{set_id}/path", "name": "path", "dataType": "sc:Text",
                               "source": {"fileSet": {"@id": file_set["@id"]}, "extract": {"fileProperty": "filepath"},
                                          "transform": {"regex": f"^.*({IMAGES_DIR}/[^/]+)$"}}},
                              {"@type": "cr:Field", "@id": f"{set_id}/image", "name": "image",
                               "dataType": "sc:ImageObject",
                               "source": {"fileSet": {"@id": file_set["@id"]}, "extract": {"fileProperty": "content"}}}]})
    return out


def table_fields(path: Path) -> list[tuple[str, str, bool]]:
    """(column, Croissant type, is an array) of a peer format's CSV/TSV header or JSONL objects; nested values
    are left out (mlcroissant reads values and lists of values)."""
    with open(path, encoding="utf-8", newline="") as fh:
        if path.suffix in (".csv", ".tsv"):
            return [(c, "sc:Text", False) for c in next(csv.reader(fh, delimiter="\t" if path.suffix == ".tsv" else ","), [])]
        rows = [json.loads(line) for line in fh if line.strip()]
    rows = [r for r in rows if isinstance(r, dict)]
    columns = list(dict.fromkeys(k for r in rows for k in r))
    typed = [(c, value_type([r.get(c) for r in rows])) for c in columns]
    return [(c, t[0], t[1]) for c, t in typed if t is not None]


def peer_record_sets(folder: Path, entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record set per table a peer format writes (CSV, TSV or JSONL beside records.jsonl): its own columns."""
    out = []
    for entry in entries:
        rel = entry["path"]
        if rel == RECORDS_NAME or "/" in rel or Path(rel).suffix not in (".csv", ".tsv", ".jsonl"):
            continue
        set_id = plain_id(Path(rel).stem)
        fields = []
        for column, data_type, array in table_fields(folder / rel):
            field = column_field(set_id, column, rel, data_type)
            if array:
                field["isArray"] = True
            fields.append(field)
        if fields:
            out.append({"@type": "cr:RecordSet", "@id": set_id, "name": set_id,
                        "description": f"The rows of {rel} (the peer format's own columns).", "field": fields})
    return out


# ---------------------------------------------------------------- RAI from the store


def _count_text(counts: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{name} {n}" for name, n in counts)


def source_datasets(provenance: Sequence[dict]) -> list[tuple[str, int]]:
    """(dataset, items) of the datasets the items come from: a source question's dataset, else the item's own (a
    MuCR record ingested as it was published has no source question, but its dataset)."""
    return sorted(Counter(str(p["dataset"]) for p in provenance if p.get("dataset")).items())


def data_collection(records: Sequence[dict], provenance: Sequence[dict], licensing: Any) -> str:
    from cftools.release.datacard import provenance_summary

    summary = provenance_summary(list(provenance))
    parts = [f"{len(records)} items ({_count_text(sorted(Counter(r['kind'] for r in records).items()))}) "
             f"made with cftools. By origin: {_count_text(summary['origins'])}."]
    sources = source_datasets(provenance)
    if sources:
        licences = getattr(licensing, "sources", {}) or {}
        parts.append("Source datasets (items, licence): " + "; ".join(
            f"{d} ({n} items, licence {licences.get(d) or 'unknown'})" for d, n in sources) + ".")
    if summary["generators"]:
        parts.append("Generated with: " + "; ".join(
            f"{g['generator']} on {g['backend']}:{g['model']}"
            + (f" with prompt {g['template_name']} ({g['template_hash']})" if g["template_name"] else "")
            + f" ({g['n_items']} items)" for g in summary["generators"]) + ".")
    image_models = image_generators(records)
    if image_models:
        parts.append("Images generated with: " + _count_text(image_models) + " (items).")
    from cftools.release.edited import edit_models

    for m in edit_models(list(records)):
        where = "data.edited_image" if m["edit"] == "relevant" else "data.irrelevant_edited_image"
        parts.append(f"Edited images, {m['edit']} edits ({where}) made with {m['model']} under licence {m['licence']}"
                     + (" (NOT FOR COMMERCIAL USE: its terms bind these images)" if m["non_commercial"] else "")
                     + f": {m['n_items']} items, {m['verified']} verified by two people.")
    if summary["corrected"]:
        parts.append(f"Annotators corrected the proposed answer of {summary['corrected']} items.")
    return " ".join(parts)


def model_mentions(value: Any) -> Iterable[str]:
    """backend:model of every object in an item's data that names both (a MuCR pair's image provenance)."""
    if isinstance(value, dict):
        if isinstance(value.get("backend"), str) and isinstance(value.get("model"), str):
            yield f"{value['backend']}:{value['model']}"
        for v in value.values():
            yield from model_mentions(v)
    elif isinstance(value, list):
        for v in value:
            yield from model_mentions(v)


def image_generators(records: Sequence[dict]) -> list[tuple[str, int]]:
    """(backend:model, items) of the image models an item's data names."""
    return sorted(Counter(m for r in records for m in set(model_mentions(r.get("data") or {}))).items())


def collection_types(provenance: Sequence[dict]) -> list[str]:
    types = []
    if any(p.get("dataset") for p in provenance):
        types.append("Secondary Data analysis")
    if any(p.get("generation") for p in provenance):
        types.append("Software Collection")  # the RAI vocabulary's term for data produced by programs
    if any(p.get("annotation") for p in provenance):
        types.append("Manual Human Curator")
    return types or ["Others"]


def annotation_protocol(records: Sequence[dict], provenance: Sequence[dict]) -> str:
    from cftools.kinds import all_kinds
    from cftools.release.datacard import provenance_summary

    summary = provenance_summary(list(provenance))
    if summary["annotated"]:
        text = (f"Each item is verified in Label Studio by two annotators who judge whether the question is related "
                f"to the image and whether the proposed answer is correct (correcting it when not); when the two "
                f"disagree, a third person adjudicates. Automatic checks (cftools check) run first and their flags "
                f"are shown to the annotators. In this release {summary['annotated']} of {len(records)} items went "
                f"through annotation: {summary['with_two_judgments']} with two judgments, of which "
                f"{summary['agreed']} agreed, and {summary['adjudicated']} were adjudicated. Decisions: "
                f"{_count_text(summary['decisions'])}. {summary['verification_words']}")
    else:
        text = (f"No item of this release went through annotation in cftools ({len(records)} items; no judgment "
                f"recorded).")
    kinds = all_kinds()
    extra = []
    for name in sorted({str(r.get("kind")) for r in records} & set(kinds)):
        for task in kinds[name].hooks.annotate.tasks:
            spec = kinds[name].hooks.annotate.task_spec(task)
            if spec is not None:
                extra.append(f"{name} {task}: {spec.annotators} annotators"
                             + (f" (+{spec.tiebreak} when they disagree)" if spec.tiebreak else "")
                             + (f", {spec.description}" if spec.description else ""))
    if extra and summary["annotated"]:
        text += " The kinds' own tasks: " + "; ".join(extra) + "."
    unverified = sum(1 for r in records if not r.get("verified"))
    if unverified:
        text += f" {unverified} items are unverified (no person accepted them; verified: false)."
    return text


def annotations_per_item(provenance: Sequence[dict]) -> str | None:
    """What the released items' verification actually got: judgments per annotated item (None: none annotated)."""
    annotated = [p["annotation"] for p in provenance if p.get("annotation")]
    if not annotated:
        return None
    per_item = Counter(int(a.get("judgments") or 0) for a in annotated)
    adjudicated = sum(1 for a in annotated if a.get("adjudicated"))
    text = (f"{len(annotated)} of {len(provenance)} items annotated; verification judgments per annotated item: "
            + ", ".join(f"{n} ({count} items)" for n, count in sorted(per_item.items())))
    return text + (f"; {adjudicated} adjudicated by a third person" if adjudicated else "")


def annotation_analysis(agreement: Sequence[dict[str, Any]]) -> list[str]:
    """One sentence per project and question: the figures of the released items' judgments."""
    def figure(value: Any, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    return [f"{row['project']}, {row['question']}: {row.get('n_items', row.get('n_pairs'))} items, "
            f"{figure(row.get('percent_agreement'), '.1f')}% agreement, Cohen's kappa "
            f"{figure(row.get('cohen_kappa'), '.3f')}, Krippendorff's alpha {figure(row.get('krippendorff_alpha'), '.3f')}"
            for row in agreement]


def people_analysis(analysis: Any) -> list[str]:
    """Each annotator's figures under their pseudonymous id and the release's error rate (issue 33)."""
    if analysis is None:
        return []
    from cftools.annotate.quality import analysis_croissant

    return analysis_croissant(analysis)


def data_limitations(records: Sequence[dict], provenance: Sequence[dict]) -> str:
    from cftools.release.datacard import provenance_summary

    summary = provenance_summary(list(provenance))
    unverified = sum(1 for r in records if not r.get("verified"))
    without_image = sum(1 for r in records if not record_image_paths(r))  # a MuCR pair's images are in its data
    parts = []
    if unverified:
        parts.append(f"{unverified} of {len(records)} items are unverified (drafts or checked items no person "
                     "accepted).")
    if without_image:
        parts.append(f"{without_image} items have no image in this release.")
    if summary["flagged_items"]:
        parts.append(f"{summary['flagged_items']} items carry automatic check flags "
                     f"({_count_text(summary['flags'])}); see the manifest's provenance.")
    if summary["generators"]:
        parts.append("Counterfactual questions were drafted by language models and may carry their phrasing.")
    from cftools.release.edited import edit_models

    for m in (m for m in edit_models(list(records)) if m["non_commercial"]):
        parts.append(f"{m['n_items']} edited images were made with {m['model']}, licence {m['licence']}: NOT FOR "
                     "COMMERCIAL USE.")
    from cftools.release.edited import unverified_edits

    if (unverified := unverified_edits(list(records))):
        parts.append(f"{unverified} edited images are NOT verified by people (exported with "
                     "--include-unverified-edits: the best-ranked candidate without a flag of the automatic edit "
                     "checks; data.edited_image_verified or data.irrelevant_edited_image_verified false).")
    return " ".join(parts) or "cftools found no limitation to report; see [release] data_limitations."


def has_synthetic_data(records: Sequence[dict], provenance: Sequence[dict]) -> bool:
    """Some item's text was drafted by a model, or some image was generated."""
    return any(p.get("generation") or p.get("origin") == "generated" for p in provenance) \
        or bool(image_generators(records))


def machine_annotation_tools(provenance: Sequence[dict]) -> list[str]:
    """The programs that annotated items: the models that drafted questions and answers, cftools' checks."""
    from cftools import __version__

    tools = sorted({f"{g['backend']}:{g['model']} (cftools generator {g['generator']})"
                    for p in provenance if (g := p.get("generation"))})
    checks = sorted({code for p in provenance for code in [*(p.get("checks_passed") or {}), *p.get("check_flags", [])]})
    if checks:
        versions = sorted({str(v) for p in provenance for v in (p.get("checks_passed") or {}).values() if v})
        tools.append(f"cftools check {', '.join(versions) or __version__} (automatic checks: {', '.join(checks)})")
    return tools


def preprocessing_protocol(ingests: Sequence[dict[str, Any]]) -> str:
    parts = [f"cftools ingest {i['format']} read {i['file']} "
             f"(SHA-256 {(i['file_sha256'] or 'not recorded')[:12]}…) on {i['date']}: {i['n_records']} records, "
             f"{i['n_skipped']} skipped as unreadable, into dataset {i['dataset']}" for i in ingests]
    text = ("; ".join(parts) + ". ") if parts else "No ingest of the source datasets is recorded in the store. "
    return text + ("Images are kept byte for byte but for their metadata (EXIF, XMP, text chunks, comments: an "
                   "author, a place, a file name), which is cut, and named by the SHA-256 of the released bytes; "
                   "text fields are stored as "
                   "read (stripped of surrounding white space); records are released sorted by id, with splits "
                   "decided by a hash of their image.")


def derived_from(provenance: Sequence[dict], licensing: Any, ingests: Sequence[dict[str, Any]]) -> list[dict]:
    """PROV-O entities: each source dataset with its licence and the files ingested into it."""
    licences = getattr(licensing, "sources", {}) or {}
    out = []
    for dataset, n in source_datasets(provenance):
        entity: dict[str, Any] = {"@type": "prov:Entity", "@id": f"source/{plain_id(dataset)}",
                                  "prov:label": f"{dataset} ({n} items of this release)",
                                  "license": licences.get(dataset) or "unknown"}
        files = [f"{i['file']} (SHA-256 {i['file_sha256']})" if i["file_sha256"] else i["file"]
                 for i in ingests if i["dataset"] == dataset]
        if files:
            entity["prov:value"] = files
        out.append(entity)
    return out


def generated_by(provenance: Sequence[dict], n_annotated: int) -> list[dict[str, Any]]:
    """PROV-O activities: one per generator, backend, model and template; the annotation when there was one."""
    from cftools.release.datacard import provenance_summary

    activities = []
    for g in provenance_summary(list(provenance))["generators"]:
        activity = {"@type": "prov:Activity", "@id": f"generation/{g['generator']}/{g['backend']}/{g['model']}",
                    "prov:label": f"cftools generator {g['generator']} ({g['n_items']} items)",
                    "prov:wasAssociatedWith": {"@type": "prov:SoftwareAgent",
                                               "prov:label": f"{g['backend']}:{g['model']}"}}
        if g["template_name"]:
            activity["prov:used"] = {"@type": "prov:Entity",
                                     "prov:label": f"prompt template {g['template_name']} ({g['template_hash']})"}
        activities.append(activity)
    if n_annotated:
        activities.append({"@type": "prov:Activity", "@id": "annotation",
                           "prov:label": f"verification of {n_annotated} items by annotators",
                           "prov:wasAssociatedWith": {"@type": "prov:SoftwareAgent",
                                                      "prov:label": ANNOTATION_PLATFORM}})
    return activities


def licence_url(licence: str | None) -> str | None:
    """The URL `license` takes: an SPDX id's page on spdx.org, a URL as given; None for anything else (unknown,
    a free-text licence, an expression of several licences, a LicenseRef- of one's own)."""
    if not licence:
        return None
    if licence.startswith(("https://", "http://")) and " " not in licence:
        return licence
    from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression

    try:
        canonical = canonicalize_license_expression(licence)
    except InvalidLicenseExpression:
        return None
    if " " in canonical or "(" in canonical or "+" in canonical or canonical.startswith("LicenseRef-"):
        return None
    return SPDX_URL.format(canonical)


def missing_people_texts(section: dict[str, Any]) -> list[str]:
    """The RAI texts only people can write that [release] leaves empty, as `[release] key (property)`."""
    return [f"{key} ({prop})" for key, prop in PEOPLE_ONLY.items() if not str(section.get(key) or "").strip()]


# ---------------------------------------------------------------- people's fields


def creators(section: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    given = section.get(CREATORS_KEY) or []
    if isinstance(given, (str, dict)):  # `creators = "Eve Smith"` is one creator, not one per letter
        given = [given]
    for creator in given:
        if isinstance(creator, dict) and creator.get("name"):
            out.append({"@type": "sc:Person", **{k: str(v) for k, v in creator.items() if k in ("name", "url", "email")}})
        elif isinstance(creator, str) and creator.strip():
            out.append({"@type": "sc:Person", "name": creator.strip()})
    return out


def joined(auto: Any, given: Any) -> Any:
    """A field cftools fills, with what people wrote in [release] appended."""
    if not given:
        return auto
    return f"{auto} {given}".strip() if isinstance(auto, str) else given


# ---------------------------------------------------------------- the document


def citation_key(name: str, version: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in f"{name}_{version}")


def croissant_document(release: Release, entries: Sequence[dict[str, Any]], section: dict[str, Any], *,
                       kind_files: dict[str, str] | None = None,
                       store_facts: StoreFacts | None = None) -> dict[str, Any]:
    """ENTRIES: the release's files (`described_files`); SECTION: the workspace's [release] texts; KIND_FILES: kind ->
    the file of that kind's rows (write_kind_files); STORE_FACTS: what only the store knows (ingests, the items'
    timeframe). The release's revision is the release it revises and the changes since it
    (`cftools.release.diff.revision_entries`, from `export --previous`)."""
    from cftools import __version__
    from cftools.kinds import all_kinds

    facts = store_facts or StoreFacts()
    records, provenance, licensing = release.records, release.provenance, release.licensing
    name, version, revision = release.name, release.version, release.revision
    file_sets = image_file_sets(entries)
    record_sets: list[dict[str, Any]] = []
    paths = {e["path"] for e in entries}
    if RECORDS_NAME in paths:
        record_sets.append(records_record_set())
        kinds = all_kinds()
        for kind, file_id in sorted((kind_files or {}).items()):
            record_set = kind_record_set(kind, records, file_id) if kind in kinds and file_id in paths else None
            if record_set:
                record_sets.append(record_set)
    record_sets += peer_record_sets(release.folder, entries)
    record_sets += images_record_set(file_sets)
    n_annotated = sum(1 for p in provenance if p.get("annotation"))
    doc: dict[str, Any] = {
        "@context": CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": [CROISSANT_1_1, RAI_1_0],
        "name": name,
        "description": (f"{name} {version}: a counterfactual multimodal benchmark released with cftools "
                        f"{__version__} ({release.format} format)."),
        "version": version,
        "url": f"./{CROISSANT_NAME}",
        "isLiveDataset": False,
        "distribution": file_objects(entries) + file_sets,
        "recordSet": record_sets,
        "rai:dataCollection": data_collection(records, provenance, licensing),
        "rai:dataCollectionType": collection_types(provenance),
        "rai:dataAnnotationProtocol": annotation_protocol(records, provenance),
        "rai:dataAnnotationPlatform": ANNOTATION_PLATFORM if n_annotated else "none (no item of this release was "
                                                                                 "annotated)",
        "rai:dataAnnotationAnalysis": ((annotation_analysis(release.agreement) or ["no two judgments of one item"])
                                       + people_analysis(release.analysis)),
        "rai:dataLimitations": data_limitations(records, provenance),
        "rai:hasSyntheticData": has_synthetic_data(records, provenance),
        "rai:machineAnnotationTools": machine_annotation_tools(provenance),
        "rai:dataPreprocessingProtocol": preprocessing_protocol(facts.ingests),
        "prov:wasDerivedFrom": derived_from(provenance, licensing, facts.ingests),
        "prov:wasGeneratedBy": generated_by(provenance, n_annotated),
    }
    if revision:
        doc["prov:wasRevisionOf"] = revision["prov:wasRevisionOf"]
        doc["prov:wasGeneratedBy"].append(revision["activity"])
    per_item = annotations_per_item(provenance)
    if per_item:
        doc["rai:annotationsPerItem"] = per_item
    if facts.timeframe:
        doc["rai:dataCollectionTimeframe"] = list(facts.timeframe)
    licence = licence_url(getattr(licensing, "licence", None))
    if licence:
        doc["license"] = licence
    if release.data_as_of:
        doc["datePublished"] = release.data_as_of[:10]
    doc["citeAs"] = (f"@misc{{{citation_key(name, version)}, title = {{{name} {version}}}, "
                     f"note = {{released with cftools}}}}")
    people = creators(section)
    if people:
        doc["creator"] = people
    for key, prop in RELEASE_FIELDS.items():
        if section.get(key):
            value = section[key]
            doc[prop] = joined(doc.get(prop), value) if prop.startswith("rai:") or prop == "description" else value
    return doc


@dataclass
class StoreFacts:
    """What croissant.json says that the records do not carry: the ingests of the released items' datasets, and
    the items' timeframe in the store (first creation, last change; ISO dates)."""

    ingests: list[dict[str, Any]] = dataclass_field(default_factory=list)
    timeframe: tuple[str, str] | None = None


def store_facts(store: Any, records: Sequence[dict], provenance: Sequence[dict]) -> StoreFacts:
    from sqlalchemy import func, select

    from cftools.models import IngestRun, Item
    from cftools.store import in_chunks

    datasets = sorted({str(p["dataset"]) for p in provenance if p.get("dataset")})
    keys = [str(r["id"]) for r in records]
    ingests = []
    starts, ends = [], []
    with store.session() as session:
        for part in in_chunks(datasets):
            for run in session.execute(select(IngestRun).where(IngestRun.dataset.in_(part))
                                       .order_by(IngestRun.created_at, IngestRun.id)).scalars():
                ingests.append({"format": run.format, "file": Path(run.path).name, "file_sha256": run.file_sha256,
                                "n_records": run.n_records, "n_skipped": run.n_skipped, "dataset": run.dataset,
                                "date": run.created_at.date().isoformat() if run.created_at else "?"})
        for part in in_chunks(keys):
            first, last = session.execute(select(func.min(Item.created_at), func.max(Item.updated_at))
                                          .where(Item.key.in_(part))).one()
            starts += [first] if first else []
            ends += [last] if last else []
    ingests.sort(key=lambda i: (i["date"], i["dataset"], i["file"]))
    timeframe = (min(starts).date().isoformat(), max(ends).date().isoformat()) if starts and ends else None
    return StoreFacts(ingests, timeframe)


def write_kind_files(folder: Path) -> dict[str, str]:
    """kind -> the file holding that kind's records: records.jsonl itself when it holds one kind; else
    kinds/<kind>.jsonl, written here with records.jsonl's own lines (Croissant cannot filter rows)."""
    source = folder / RECORDS_NAME
    if not source.is_file():
        return {}
    lines: dict[str, list[str]] = {}
    with open(source, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                lines.setdefault(str(json.loads(line).get("kind")), []).append(line)
    if len(lines) <= 1:
        return {kind: RECORDS_NAME for kind in lines}
    (folder / KINDS_DIR).mkdir(exist_ok=True)
    for kind, rows in lines.items():
        with open(folder / KINDS_DIR / f"{plain_id(kind)}.jsonl", "w", encoding="utf-8", newline="\n") as fh:
            fh.writelines(rows)
    return {kind: f"{KINDS_DIR}/{plain_id(kind)}.jsonl" for kind in lines}


def described_files(folder: Path) -> list[dict[str, Any]]:
    """The release's files with size and SHA-256, but the images by name only (a file set describes them; their
    names are their SHA-256s): the images are hashed once per export (by the manifest), not twice."""
    out = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        image = rel.startswith(f"{IMAGES_DIR}/")
        out.append({"path": rel} if image else {"path": rel, "size": path.stat().st_size, "sha256": hash_file(path)})
    return out


def write_croissant(release: Release) -> list[str]:
    """croissant.json in the release's folder, describing every file already there (call it last but for the
    manifest); returns its warnings (the RAI texts only people can write that are empty)."""
    folder, workspace = release.folder, release.workspace
    section = workspace.section("release")
    kind_files = write_kind_files(folder)
    doc = croissant_document(release, described_files(folder), section, kind_files=kind_files,
                             store_facts=store_facts(workspace.store, release.records, release.provenance))
    (folder / CROISSANT_NAME).write_text(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                                         encoding="utf-8")
    warnings = []
    missing = missing_people_texts(section)
    if missing:
        warnings.append(f"{CROISSANT_NAME}: the Responsible-AI texts only people can write are empty: "
                        f"{', '.join(missing)}; write them under [release] in cftools.toml")
    licence = getattr(release.licensing, "licence", None)
    if licence and licence_url(licence) is None:
        warnings.append(f"{CROISSANT_NAME}: the licence {licence!r} is neither an SPDX id nor a URL, so its "
                        "`license` is left out (rai:dataCollection names the sources' licences)")
    return warnings


# ---------------------------------------------------------------- verify


def check_croissant(release_dir: Path) -> list[str]:
    """What is wrong with a release's croissant.json (empty: nothing): every file it lists must be one the manifest
    lists, with the manifest's SHA-256 (the manifest check compares those with the files), and mlcroissant, when
    installed, must read it without errors. A release made before croissant.json existed has none (the manifest
    check names it missing where the manifest lists it)."""
    path = Path(release_dir) / CROISSANT_NAME
    if not path.is_file():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return [f"{CROISSANT_NAME}: not valid JSON ({exc})"]
    manifest = {entry.get("path"): entry.get("sha256") for entry in load_manifest(release_dir).get("files") or []
                if isinstance(entry, dict)}
    problems = []
    for entry in doc.get("distribution") or []:
        if not isinstance(entry, dict) or entry.get("@type") != "cr:FileObject":
            continue
        rel = str(entry.get("contentUrl") or "")
        if rel not in manifest:
            problems.append(f"{CROISSANT_NAME}: distribution lists {rel!r}, which the manifest does not")
        elif manifest[rel] != entry.get("sha256"):
            problems.append(f"{CROISSANT_NAME}: the SHA-256 it lists for {rel} differs from the manifest's")
    problems += [f"{CROISSANT_NAME}: {issue}" for issue in mlcroissant_issues(path)]
    return problems


def mlcroissant_issues(path: Path) -> list[str]:
    """mlcroissant's errors about the file ([] when mlcroissant is not installed: the hash checks still run)."""
    try:
        import mlcroissant as mlc
    except ImportError:
        return []
    try:
        mlc.Dataset(jsonld=str(path))
    except mlc.ValidationError as exc:
        return [line.strip() for line in str(exc).splitlines() if line.strip().startswith("-")] or [str(exc)]
    return []
