"""Images leave without their metadata: a source photo's EXIF (author, GPS, the file it came from) and a PNG's text
chunks are cut at export, byte for byte otherwise, and the personal-data scan refuses a release image that has any."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
from pathlib import Path

import PIL.Image
import PIL.PngImagePlugin
import pytest

from test_export import ACCEPTED, LICENCE, item_keys, peer_rows, set_status

from cftools.kinds.cvqa.ingest import ingest_cvqa
from cftools.release.export import ExportOptions, export_release
from cftools.release.image_metadata import metadata_found, without_metadata
from cftools.release.layout import load_records
from cftools.release.scan import scan_release
from cftools.release.verify import verify_release

N_ROWS = 6
AUTHOR, EMAIL, SOURCE = "Jane Doe", "jane.doe@example.org", "/home/jane/photos/holiday.jpg"


def photo(shade: int, fmt: str, orientation: int | None = None) -> bytes:
    """A small image carrying an author, an email, a path and GPS (JPEG: EXIF; PNG: text chunks)."""
    image = PIL.Image.new("RGB", (32, 24), (shade, 255 - shade, 120))
    buffer = io.BytesIO()
    if fmt == "JPEG":
        exif = image.getexif()
        exif[0x013B], exif[0x8298], exif[0x010E] = AUTHOR, EMAIL, SOURCE  # Artist, Copyright, ImageDescription
        exif[0x8825] = {1: "N", 2: (52.0, 22.0, 10.0), 3: "E", 4: (4.0, 53.0, 0.0)}  # GPS
        if orientation:
            exif[0x0112] = orientation
        image.save(buffer, format="JPEG", exif=exif, comment=AUTHOR.encode())
    else:
        info = PIL.PngImagePlugin.PngInfo()
        info.add_text("Author", f"{AUTHOR} {EMAIL}")
        info.add_text("Source", SOURCE)
        exif = image.getexif()
        exif[0x013B] = AUTHOR
        if orientation:
            exif[0x0112] = orientation
        image.save(buffer, format="PNG", pnginfo=info, exif=exif)
    return buffer.getvalue()


def pixels(data: bytes) -> bytes:
    with PIL.Image.open(io.BytesIO(data)) as image:
        return image.convert("RGB").tobytes()


def personal_bytes(data: bytes) -> list[str]:
    return [s for s in (AUTHOR, EMAIL, SOURCE, "GPS") if s.encode() in data]


@pytest.fixture
def photographed(workspace, peer_cvqa_real, tmp_path):
    """C-VQA items whose source images carry their photographer's name, email, folder and GPS."""
    folder = tmp_path / "images"
    folder.mkdir()
    for n, row in enumerate(peer_rows(peer_cvqa_real)[:N_ROWS]):
        (folder / row["img_path"]).write_bytes(photo(20 * n, "JPEG" if n % 2 else "PNG", orientation=6 if n == 1 else None))
    ingest_cvqa(workspace.store, peer_cvqa_real, folder, licence=LICENCE)
    with workspace.store.session() as session:
        from sqlalchemy import select

        from cftools.models import Item
        keys = [k for k in item_keys(workspace)
                if session.execute(select(Item.source_id).where(Item.key == k)).scalar_one() is not None]
    set_status(workspace, ACCEPTED, keys)
    return workspace


def test_metadata_is_cut_and_the_pixels_and_orientation_stay():
    for fmt in ("JPEG", "PNG"):
        data = photo(60, fmt, orientation=6)
        released, cut = without_metadata(data)
        assert cut and not personal_bytes(released) and not metadata_found(released)
        assert pixels(released) == pixels(data)
        assert without_metadata(released) == (released, [])  # what it releases it keeps as it is
    for fmt in ("JPEG", "PNG"):
        with PIL.Image.open(io.BytesIO(without_metadata(photo(60, fmt, orientation=6))[0])) as image:
            assert dict(image.getexif()) == {0x0112: 6}  # how to turn it, and nothing else
    clean = io.BytesIO()
    PIL.Image.new("RGB", (8, 8), (1, 2, 3)).save(clean, format="PNG")
    assert without_metadata(clean.getvalue()) == (clean.getvalue(), [])  # no metadata: the same bytes


def test_released_images_carry_no_metadata_in_any_file(photographed, tmp_path):
    """Before: the images were copied byte for byte, EXIF and GPS included, into images/, the Parquet image
    column and VLMEvalKit's base64 cells; the scan did not read images."""
    for fmt in ("native", "cvqa", "vlmevalkit"):
        result = export_release(photographed, "bench", "1.0", tmp_path / "out", options=ExportOptions(fmt=fmt))
        files = [p for p in result.path.rglob("*") if p.is_file()]
        images = [p for p in files if p.parent.name == "images"]
        assert images
        for path in files:
            data = path.read_bytes()
            assert not personal_bytes(data), path
            if path.suffix == ".tsv":
                for row in csv.DictReader(io.StringIO(data.decode()), delimiter="\t"):
                    for cell in ([row["image"]] if not row["image"].startswith("[") else json.loads(row["image"])):
                        assert not personal_bytes(base64.b64decode(cell)), path
        for record in (load_records(result.path) if fmt == "native" else []):
            if record["image"]:
                data = (result.path / record["image"]).read_bytes()
                assert hashlib.sha256(data).hexdigest() == record["image_sha256"] == Path(record["image"]).stem
        assert verify_release(result.path).ok
        if fmt == "native":
            import pyarrow.parquet as pq

            table = pq.read_table(next(result.path.glob("data/*.parquet")))
            assert all(not personal_bytes(cell["bytes"]) for cell in table.column("image").to_pylist() if cell)


def test_the_scan_refuses_an_image_with_metadata(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.jpg").write_bytes(photo(10, "JPEG"))
    (tmp_path / "images" / "b.png").write_bytes(photo(10, "PNG"))
    webp = io.BytesIO()
    image = PIL.Image.new("RGB", (8, 8))
    exif = image.getexif()
    exif[0x013B] = AUTHOR
    image.save(webp, format="WEBP", exif=exif)
    (tmp_path / "images" / "c.webp").write_bytes(webp.getvalue())
    found = scan_release(tmp_path)
    assert [f.split(" ")[0] for f in found] == ["images/a.jpg", "images/b.png", "images/c.webp"]
    assert "EXIF" in found[0] and "text" in found[1] and "convert" in found[2]
    assert not any(AUTHOR in f or EMAIL in f for f in found)


def test_the_scan_reads_file_names_and_parquet_metadata(tmp_path):
    """Before: only the files' contents were read, and Parquet's cells but not its key-value metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "images" / EMAIL).mkdir(parents=True)
    clean = io.BytesIO()
    PIL.Image.new("RGB", (8, 8)).save(clean, format="PNG")
    (tmp_path / "images" / EMAIL / "1.png").write_bytes(clean.getvalue())
    table = pa.table({"a": ["x"]}).replace_schema_metadata({"origin": f"written from {SOURCE}"})
    pq.write_table(table, tmp_path / "t.parquet")
    found = scan_release(tmp_path)
    assert any(f.startswith(f"images/{EMAIL}/1.png name:") and " name: an email address (j…@example.org)" in f for f in found)
    assert any(f.startswith("t.parquet metadata origin: a local absolute path (/home/…)") for f in found), found


def test_a_plain_tiff_passes_and_one_naming_its_author_does_not():
    """Before this rule, every TIFF would have been refused: its own tags (width, compression) are EXIF to Pillow."""
    image = PIL.Image.new("RGB", (8, 8))
    plain = io.BytesIO()
    image.save(plain, format="TIFF")
    assert metadata_found(plain.getvalue()) == []
    exif = image.getexif()
    exif[0x013B] = AUTHOR
    signed = io.BytesIO()
    image.save(signed, format="TIFF", exif=exif)
    assert metadata_found(signed.getvalue()) == ["EXIF Artist (TIFF: cftools cannot cut it; convert the image to PNG)"]


def test_the_scan_reads_the_images_parquet_and_tsv_embed(tmp_path):
    """Before: the Parquet image column's bytes and VLMEvalKit's base64 cells were not read (the release's copies of
    the photo there kept its EXIF as well)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = photo(10, "JPEG")
    pq.write_table(pa.table({"image": [{"bytes": data, "path": "images/a.jpg"}], "id": ["x"]}), tmp_path / "t.parquet")
    encoded = base64.b64encode(data).decode("ascii")
    (tmp_path / "CF_b_cvqa_OpenEnded.tsv").write_text(
        f"index\timage\tquestion\n0\t{encoded}\tHow many?\n1\t{json.dumps([encoded, encoded])}\tWhich?\n",
        encoding="utf-8")
    found = scan_release(tmp_path)
    assert [f.split(":")[0] for f in found] == ["CF_b_cvqa_OpenEnded.tsv row 1, column image",
                                                "CF_b_cvqa_OpenEnded.tsv row 2, column image",
                                                "t.parquet row 0, column image"], found
    assert all("EXIF" in f and AUTHOR not in f for f in found)


def test_stray_bytes_between_jpeg_segments_are_cut_not_refused():
    """Pillow reads past bytes between a JPEG's segments; so does the cut, rather than refusing the image."""
    clean = io.BytesIO()
    PIL.Image.new("RGB", (16, 16), (5, 6, 7)).save(clean, format="JPEG")
    data = clean.getvalue()
    after_app0 = 4 + int.from_bytes(data[4:6], "big")
    sloppy = data[:after_app0] + b"junk" + data[after_app0:]
    assert pixels(sloppy) == pixels(data)
    assert without_metadata(sloppy) == (data, ["bytes between segments"])
