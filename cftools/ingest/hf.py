"""`ingest hf`: source questions from a Hugging Face dataset (a Hub id, a `save_to_disk` folder, or Parquet files)
with a question, an answer and an image column, stored like every other ingest's.

Rows are read in Arrow batches, never as decoded images: an image given as bytes (the `datasets` Image feature) is
hashed, decoded once per distinct SHA-256 to check it, and written under the workspace's `images/sources/` by its
hash (removed again if the ingest stops); an image given as a path is the file itself, as `ingest table` takes it. As with `ingest vqav2`, a bad row
stops the ingest with the store unchanged, or with skip_bad is left out and listed; a rerun adds nothing.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import PIL.Image

from cftools.errors import CftoolsError, Hint, InputError, NoRecordsError
from cftools.images import ImageFile, image_ref_path, read_image_file, write_atomically
from cftools.ingest.licences import LicenceChoice, chosen_licence
from cftools.ingest.readers import (BadRecords, IngestReport, ReadInput, image_path_problem, infer_answer_type,
                                    most_frequent_answer, outside_images, stable_key, write_bad_report,
                                    write_records)
from cftools.models import utcnow
from cftools.progress import ProgressCallback, no_progress
from cftools.store import Store

SOURCE_IMAGES_FOLDER = Path("images") / "sources"  # images that came as bytes, under the workspace
BATCH_ROWS = 2048
READ_STEP = "reading rows"
NEEDS_EXTRA = "ingest hf needs the export extra: pip install 'cftools[export]' ({} is not installed)"

# The first column present is taken when no option names one: VQAv2 on the Hub first (HuggingFaceM4/VQAv2,
# lmms-lab/VQAv2), then GQA-like `answer` and a plain `id`.
DEFAULT_COLUMNS = {
    "question": ("question",),
    "answer": ("answers", "multiple_choice_answer", "answer"),
    "image": ("image",),
    "id": ("question_id", "id"),
}
META_COLUMNS = ("image_id", "question_type")  # kept with the source question when present


class RowProblem(ValueError):
    """What is wrong with a row, with the CLI's HINT (the InputError made of it names the file and row)."""

    def __init__(self, reason: str, hint: Optional[Hint] = None) -> None:
        super().__init__(reason)
        self.hint = hint

@dataclass(frozen=True)
class Columns:
    """The columns a dataset's rows are read from (answer and id may be absent)."""

    question: str
    image: str
    answer: Optional[str] = None
    id: Optional[str] = None
    answer_type: Optional[str] = None
    meta: tuple[str, ...] = ()

    def names(self) -> list[str]:
        given = [self.question, self.image, self.answer, self.id, self.answer_type, *self.meta]
        return list(dict.fromkeys(c for c in given if c))


Batch = tuple[str, int, list[dict]]  # (the file or dataset it comes from, its first row's index, its rows)


@dataclass
class Rows:
    """A dataset opened for reading: its batches (with the file they come from), row count and column names."""

    label: str  # how errors name it: the Hub id, the folder or the file
    columns: list[str]
    n_rows: int
    batches: Callable[[list[str]], Iterator[Batch]]  # the columns to read -> their batches
    base: Optional[Path] = None  # the folder relative image paths are read from
    name: str = ""  # the default dataset name's stem


def needs(module: str) -> Any:
    """Import MODULE of the export extra, or say in one line what to install."""
    import importlib

    try:
        loaded = importlib.import_module(module)
    except ImportError:
        raise CftoolsError(NEEDS_EXTRA.format(module.split(".")[0])) from None
    if module == "datasets":  # our progress line is the one shown; its own bars and cache notes would interleave
        loaded.disable_progress_bars()
        loaded.utils.logging.set_verbosity_error()
    return loaded


# ---------------------------------------------------------------- opening the source


def parquet_files(folder: Path, split: Optional[str]) -> list[Path]:
    """The Parquet files under FOLDER, in name order; with SPLIT, those the Hub's layouts give to it
    (`data/SPLIT-00000-of-00001.parquet`, `SPLIT/0000.parquet`, `SPLIT.parquet`)."""
    files = sorted(p for p in folder.rglob("*.parquet") if p.is_file())
    if split is None:
        return files
    return [p for p in files if split in p.relative_to(folder).parts[:-1]
            or p.name.startswith(f"{split}-") or p.stem == split]


def open_parquet(source: Path, split: Optional[str], base: Optional[Path]) -> Rows:
    pq = needs("pyarrow.parquet")
    files = [source] if source.is_file() else parquet_files(source, split)
    if not files:
        raise InputError(source, f"no Parquet files{f' for split {split!r}' if split else ''} in this folder")
    opened = []
    for file in files:
        try:
            opened.append((file, pq.ParquetFile(file)))
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise InputError(file, f"not a readable Parquet file ({exc})") from None
    columns = opened[0][1].schema_arrow.names
    for file, handle in opened[1:]:
        if handle.schema_arrow.names != columns:
            raise InputError(file, f"its columns {handle.schema_arrow.names} are not those of {opened[0][0].name} "
                                   f"{columns}")

    def batches(wanted: list[str]) -> Iterator[Batch]:
        for file, handle in opened:
            label = str(file)
            start = 0
            try:
                for batch in handle.iter_batches(batch_size=BATCH_ROWS, columns=wanted):
                    rows = batch.to_pylist()
                    yield label, start, rows
                    start += len(rows)
            except (OSError, ValueError) as exc:
                raise InputError(file, f"not a readable Parquet file ({exc})", f"row {start}") from None

    folder = source if source.is_dir() else source.parent
    return Rows(str(source), columns, sum(h.metadata.num_rows for _, h in opened), batches,
                base or folder, name=source.stem if source.is_file() else source.name)


def one_split(dataset: Any, label: str, split: Optional[str]) -> Any:
    """A `datasets` Dataset: the one asked for, or the only split of a DatasetDict."""
    if not hasattr(dataset, "keys"):
        return dataset
    splits = list(dataset.keys())
    if split is not None:
        if split not in splits:
            raise InputError(label, f"no split {split!r}; it has {', '.join(splits)}")
        return dataset[split]
    if len(splits) != 1:
        raise InputError(label, f"it has the splits {', '.join(splits)}",
                         hint=Hint("{message}: name one with {split}", split="--split"))
    return dataset[splits[0]]


def open_dataset(dataset: Any, label: str, base: Optional[Path], name: str) -> Rows:
    """Rows of a `datasets` Dataset, read as Arrow (images stay bytes, never decoded here)."""
    def batches(wanted: list[str]) -> Iterator[Batch]:
        start = 0
        for table in dataset.select_columns(wanted).with_format("arrow").iter(batch_size=BATCH_ROWS):
            rows = table.to_pylist()
            yield label, start, rows
            start += len(rows)
    return Rows(label, list(dataset.column_names), len(dataset), batches, base, name)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0]}" if text else exc.__class__.__name__


def looks_local(source: str) -> bool:
    """SOURCE is a path, not a Hub id (`name` or `owner/name`)."""
    return (source.startswith((".", "/", "~")) or source.count("/") > 1 or "\\" in source
            or source.lower().endswith((".parquet", ".arrow")))


def open_source(source: str, split: Optional[str] = None, config: Optional[str] = None,
                images_dir: Optional[Path] = None) -> Rows:
    """SOURCE as rows: a Parquet file, a folder of them, a `save_to_disk` folder, else a Hub id (offline from the
    local cache under HF_HUB_OFFLINE=1)."""
    path = Path(source)
    if (path.is_file() or path.is_dir()) and config is not None:
        raise InputError(source, f"a configuration ({config!r}) is a Hub dataset's; this is a local "
                                 f"{'file' if path.is_file() else 'folder'}")
    if path.is_file():
        if split is not None:
            raise InputError(source, f"one file holds one split: {split!r} picks among a folder's files or a "
                                     "dataset's splits")
        return open_parquet(path, split, images_dir)
    if path.is_dir():
        if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
            datasets = needs("datasets")
            try:
                saved = datasets.load_from_disk(str(path))
            except Exception as exc:  # noqa: BLE001 - a broken save_to_disk folder fails in many ways; one line
                raise InputError(source, f"not a readable save_to_disk folder: {first_line(exc)}") from None
            return open_dataset(one_split(saved, source, split), source, images_dir or path, path.name)
        return open_parquet(path, split, images_dir)
    if looks_local(source):
        raise InputError(source, "no such file or folder")
    datasets = needs("datasets")
    try:
        loaded = datasets.load_dataset(source, name=config, split=split)
    except Exception as exc:  # noqa: BLE001 - the Hub client raises many kinds; each becomes one line
        offline = " (HF_HUB_OFFLINE is set: only the local cache is read)" if os.environ.get("HF_HUB_OFFLINE") else ""
        raise InputError(source, f"cannot load this Hugging Face dataset{offline}: {first_line(exc)}") from None
    return open_dataset(one_split(loaded, source, split), source, images_dir, source)


# ---------------------------------------------------------------- columns


def choose_columns(rows: Rows, question: Optional[str] = None, answer: Optional[str] = None,
                   image: Optional[str] = None, id_column: Optional[str] = None) -> Columns:
    """The columns to read: the ones named, else the first default present; a named column the dataset lacks,
    or no question or image column, stops the ingest naming the columns it has."""
    have = rows.columns

    def pick(role: str, named: Optional[str], required: bool) -> Optional[str]:
        if named:
            if named not in have:
                raise InputError(rows.label, f"no column {named!r} (--{role}-column); it has {', '.join(have)}")
            return named
        found = next((c for c in DEFAULT_COLUMNS[role] if c in have), None)
        if found is None and required:
            raise InputError(rows.label, f"no {role} column ({' or '.join(DEFAULT_COLUMNS[role])}); name it with "
                                         f"--{role}-column: it has {', '.join(have)}")
        return found

    # an empty --answer-column reads no answers: a test split whose answer column is there but empty
    chosen = Columns(question=pick("question", question, True), image=pick("image", image, True),
                     answer=None if answer == "" else pick("answer", answer, False), id=pick("id", id_column, False))
    taken = set(chosen.names())
    return Columns(chosen.question, chosen.image, chosen.answer, chosen.id,
                   "answer_type" if "answer_type" in have and "answer_type" not in taken else None,
                   tuple(c for c in META_COLUMNS if c in have and c not in taken))


def answer_texts(value: Any) -> Optional[list[str]]:
    """A list answer column's texts (VQAv2's `answers`: strings, or objects with an `answer`), else None."""
    if not isinstance(value, list):
        return None
    texts = [v.get("answer") if isinstance(v, dict) else v for v in value]
    return [str(t).strip() for t in texts if t is not None and str(t).strip()]


# ---------------------------------------------------------------- images


@dataclass
class SourceImages:
    """The images of one ingest by reference, checked once per distinct content; images given as bytes are written
    as soon as checked (a dataset's images need not fit in memory), and the files this ingest made are listed in
    MADE, to remove if it stops."""

    folder: Path  # where images given as bytes are written
    base: Optional[Path]  # where images given as paths are read
    by_ref: dict[str, ImageFile] = field(default_factory=dict)
    checked: dict[str, ImageFile] = field(default_factory=dict)  # sha256 -> the image
    ref_sha: dict[str, str] = field(default_factory=dict)
    made: list[Path] = field(default_factory=list)

    def take(self, value: Any) -> str:
        """The image reference of one row's image value (Image feature, bytes or path); raises ValueError why not."""
        if isinstance(value, dict):
            data, given = value.get("bytes"), value.get("path")
        elif isinstance(value, (bytes, bytearray)):
            data, given = bytes(value), None
        elif isinstance(value, str):
            data, given = None, value
        else:
            raise ValueError("no image" if value is None else f"an image value of type {type(value).__name__}")
        if data:
            return self.take_bytes(bytes(data), given)
        if given and str(given).strip():
            return self.take_path(str(given).strip())
        raise ValueError("no image")

    def take_bytes(self, data: bytes, given: Optional[str]) -> str:
        sha = hashlib.sha256(data).hexdigest()
        image = self.checked.get(sha) or self.check_bytes(data, sha)
        # the file name the dataset kept (never a folder of the machine it was made on), unless another image has it
        name = image_ref_path(os.path.basename(str(given).replace("\\", "/"))) if given else ""
        ref = name if name and self.ref_sha.setdefault(name, sha) == sha else f"{sha}.{image.format or 'img'}"
        self.ref_sha.setdefault(ref, sha)
        self.by_ref.setdefault(ref, image)
        return ref

    def check_bytes(self, data: bytes, sha: str) -> ImageFile:
        try:
            with PIL.Image.open(io.BytesIO(data)) as img:
                width, height, fmt = img.width, img.height, (img.format or "").lower()
                img.verify()
            with PIL.Image.open(io.BytesIO(data)) as img:
                img.load()  # verify() reads no pixels: a cut-short image passes it
        except (OSError, PIL.Image.DecompressionBombError, SyntaxError, ValueError) as exc:
            raise ValueError(f"not a readable image ({exc.__class__.__name__}: {exc})") from None
        path = self.folder / sha[:2] / f"{sha}.{fmt or 'img'}"
        image = ImageFile(path=path, sha256=sha, width=width, height=height, format=fmt, size_bytes=len(data))
        if not path.is_file():
            self.write(path, data)
        self.checked[sha] = image
        return image

    def take_path(self, given: str) -> str:
        ref = image_ref_path(given)
        if ref in self.by_ref:
            return ref
        if self.base is None:
            raise RowProblem(f"image path {given!r}, but no folder to read it from",
                             Hint("{message} (give {images})", images="--images"))
        problem = image_path_problem(given, self.base)
        if problem:
            raise ValueError(problem)
        file = self.base / given
        if not file.is_file():
            raise ValueError(f"image file {given!r} not found under {self.base}")
        real = outside_images(file, self.base)
        if real is not None:
            raise ValueError(f"image path {given!r} is a link to {real}, outside {self.base}")
        try:
            image = read_image_file(file)
        except InputError as err:
            raise ValueError(err.reason) from None
        self.by_ref[ref] = self.checked.setdefault(image.sha256, image)
        self.ref_sha[ref] = image.sha256
        return ref

    def write(self, path: Path, data: bytes) -> None:
        write_atomically(path, data)
        self.made.append(path)

    def remove_made(self) -> None:
        """Remove the files this ingest wrote (it stopped: the store does not know them)."""
        for path in self.made:
            path.unlink(missing_ok=True)
        self.made.clear()


# ---------------------------------------------------------------- rows


@dataclass
class RowReader:
    """Turns rows into source-question records, one bad row at a time."""

    dataset: str
    columns: Columns
    images: SourceImages
    bad: BadRecords
    multi_file: bool = False  # rows from several files: a record names its file too
    seen_ids: dict[str, str] = field(default_factory=dict)
    sources: dict[str, dict] = field(default_factory=dict)

    def read(self, label: str, index: int, row: dict) -> None:
        record = f"{Path(label).name}, row {index}" if self.multi_file else f"row {index}"
        try:
            self.sources.setdefault(*self.source(row, record))
        except ValueError as exc:
            self.bad.add(InputError(label, str(exc), f"row {index}", hint=getattr(exc, "hint", None)))

    def source(self, row: dict, record: str) -> tuple[str, dict]:
        cols = self.columns
        # the id first: a row skipped for another reason still holds its id, so a later row giving it is refused
        # too, whichever of the two was bad (as `ingest vqav2` and every reader do)
        external_id = self.external_id(row, record)
        question = row.get(cols.question)
        if question is None or not str(question).strip():
            raise ValueError(f"empty or missing question (column {cols.question!r})")
        answer, answers = self.answer(row)
        image_ref = self.images.take(row.get(cols.image))
        if external_id is None:
            external_id = stable_key(self.images.ref_sha.get(image_ref, image_ref), question, answer)
        meta: dict[str, Any] = {"line": record, **{c: row[c] for c in cols.meta if row.get(c) is not None}}
        answer_type = row.get(cols.answer_type) if cols.answer_type else None
        return external_id, {
            "dataset": self.dataset, "external_id": external_id, "image_ref": image_ref,
            "question": str(question).strip(), "answer": answer,
            "answer_type": str(answer_type) if answer_type else (infer_answer_type(answer) if answer else None),
            "answers": answers, "meta": meta, "created_at": utcnow()}

    def answer(self, row: dict) -> tuple[Optional[str], Optional[list[str]]]:
        """The answer (a list column: its most frequent, as `ingest vqav2` takes it) and the list, if one."""
        col = self.columns.answer
        if col is None:
            return None, None  # a split without answers (a test split), as `ingest vqav2` without annotations
        value = row.get(col)
        texts = answer_texts(value)
        answer = most_frequent_answer(texts) if texts is not None else (None if value is None else str(value).strip())
        if not answer:
            raise ValueError(f"empty or missing answer (column {col!r})")
        return answer, texts

    def external_id(self, row: dict, record: str) -> Optional[str]:
        if self.columns.id is None or row.get(self.columns.id) is None or not str(row[self.columns.id]).strip():
            return None
        key = str(row[self.columns.id]).strip()
        first = self.seen_ids.setdefault(key, record)
        if first != record:
            raise ValueError(f"{self.columns.id} {key!r} is given twice (first at {first})")
        return key


def dataset_name(rows: Rows, name: Optional[str], config: Optional[str], split: Optional[str]) -> str:
    if name:
        return name
    return ":".join(["hf", rows.name, *(part for part in (config, split) if part)])


@dataclass(frozen=True)
class HfSource:
    """Which dataset to read (a Hub id, a save_to_disk folder or Parquet files), which split and configuration,
    which columns, where its image files are, and the dataset name its rows go under (None: the defaults)."""

    source: str
    split: Optional[str] = None
    config: Optional[str] = None
    question_column: Optional[str] = None
    answer_column: Optional[str] = None
    image_column: Optional[str] = None
    id_column: Optional[str] = None
    images_dir: Optional[Path] = None
    dataset: Optional[str] = None


def ingest_hf(store: Store, workspace_root: Path, hf: HfSource, *, skip_bad: bool = False,
              report_path: Optional[Path] = None, licence: LicenceChoice = None, update: bool = False,
              progress: ProgressCallback = no_progress) -> IngestReport:
    """Ingest a Hugging Face dataset's rows as source questions (see the module's docstring)."""
    source = hf.source
    rows = open_source(source, hf.split, hf.config, hf.images_dir)
    columns = choose_columns(rows, hf.question_column, hf.answer_column, hf.image_column, hf.id_column)
    name = dataset_name(rows, hf.dataset, hf.config, hf.split)
    bad = BadRecords(skip_bad)
    images = SourceImages(Path(workspace_root) / SOURCE_IMAGES_FOLDER, rows.base)
    reader = RowReader(name, columns, images, bad)
    try:
        done = read_rows(rows, columns, reader, progress)
        if done == 0:
            raise NoRecordsError(source)
        report = IngestReport(format="hf", path=source, dataset=name, n_records=len(reader.sources))
        report.bad = bad.items
        if report.bad and report_path is not None:
            write_bad_report(report, report_path)  # before the store write: a failure leaves the store unchanged
        read = ReadInput("hf", Path(source), name, list(reader.sources.values()), [], report.n_records, bad)
        write_records(store, read, images.by_ref, report, chosen_licence(licence, name), update)
    except BaseException:
        images.remove_made()  # a bad row, a refused update, a failed write: leave no file behind
        raise
    return report


def read_rows(rows: Rows, columns: Columns, reader: RowReader, progress: ProgressCallback) -> int:
    """Feed every row to READER, batch by batch, reporting the rows read; returns how many."""
    done = 0
    progress(READ_STEP, 0, rows.n_rows)
    for label, start, batch in rows.batches(columns.names()):
        reader.multi_file = label != rows.label
        for offset, row in enumerate(batch):
            reader.read(label, start + offset, row)
        done += len(batch)
        progress(READ_STEP, done, rows.n_rows)
    return done
