"""Image files in the store: registered by the SHA-256 of their bytes, with size and format from Pillow."""

from __future__ import annotations

import base64
import hashlib
import json
import mimetypes
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from sqlalchemy import select
from sqlmodel import Session

from cftools.errors import InputError, naming_the_file
from cftools.models import Image, ImageName, SourceQuestion, utcnow
from cftools.store import Store

if TYPE_CHECKING:  # Pillow is imported where an image is read: API commands that send files never load it
    import PIL.Image

# How an item's data names a further stored image (a MuCR pair, a candidate): `sha256:<hex>`.
STORE_IMAGE_REF = re.compile(r"^sha256:([0-9a-f]{64})$")

HASH_CHUNK = 1 << 20
# Generated images live in the workspace under their SHA-256 (`<folder>/<sha[:2]>/<sha>.png`); the images request
# cache (llm_cache rows of this backend) lists the SHA-256s each request returned. Here, not in the kind that
# generates them, so that doctor can check the files without importing a kind.
GENERATED_IMAGES_FOLDER = Path("images") / "generated"
IMAGE_CACHE_BACKEND = "images"


@dataclass(frozen=True)
class ImageFile:
    path: Path
    sha256: str
    width: int
    height: int
    format: str
    size_bytes: int


def write_atomically(path: Path, data: bytes) -> None:
    """DATA to PATH through a partial file: never a half-written file under the final name, none left behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    try:
        with naming_the_file(path):
            partial.write_bytes(data)
    except BaseException:
        partial.unlink(missing_ok=True)  # a full disk or an interrupt: no partial file left behind either
        raise
    partial.replace(path)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_image_file(path: Path, record: object | None = None) -> ImageFile:
    """Hash and measure one image; an unreadable, truncated or non-image file is an InputError naming it."""
    import PIL.Image

    try:
        with PIL.Image.open(path) as img:
            width, height, fmt = img.width, img.height, (img.format or "").lower()
            img.verify()  # structure and checksums
        # verify() reads no pixels: a JPEG cut short passes it, so decode the whole image once.
        with PIL.Image.open(path) as img:
            img.load()
    except (OSError, PIL.Image.DecompressionBombError, SyntaxError, ValueError) as exc:
        raise InputError(path, f"not a readable image ({exc.__class__.__name__}: {exc})", record) from None
    return ImageFile(path=path, sha256=sha256_file(path), width=width, height=height, format=fmt,
                     size_bytes=path.stat().st_size)


def image_ref_path(ref: str) -> str:
    """An input's image reference as a relative POSIX path ("img\\a.jpg" -> "img/a.jpg", "./a.jpg" -> "a.jpg")."""
    parts = [part for part in str(ref).replace("\\", "/").split("/") if part not in ("", ".")]
    return "/".join(parts)


class FolderIndex:
    """Every file under an images folder by its path relative to the folder. A reference names a file by that
    path, or by a path that ends with it or that it ends with ("C-VQA-Real/a/x.jpg" finds "a/x.jpg" under an
    --images pointing inside); two different files matching one reference make it ambiguous."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.by_rel: dict[str, Path] = {}
        self.by_name: dict[str, list[str]] = {}
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames.sort()
            for name in sorted(filenames):
                path = Path(dirpath) / name
                rel = path.relative_to(folder).as_posix()
                self.by_rel[rel] = path
                self.by_name.setdefault(name, []).append(rel)

    def find(self, ref: str) -> list[str]:
        """The relative paths REF can mean: the exact one, else every file one path ends with the other."""
        ref = image_ref_path(ref)
        if ref in self.by_rel:
            return [ref]
        name = ref.rsplit("/", 1)[-1]
        return [rel for rel in self.by_name.get(name, [])
                if ref.endswith("/" + rel) or rel.endswith("/" + ref)]


def register_image(store: Store, session: Session, image: ImageFile, name: str | None = None) -> tuple[int, bool]:
    """Return the image's id, adding it if its content is new; records the file name too."""
    existing = session.execute(select(Image.id).where(Image.sha256 == image.sha256)).scalar_one_or_none()
    added = existing is None
    if added:
        store.insert_ignore(session, Image.__table__, [{
            "sha256": image.sha256, "width": image.width, "height": image.height, "format": image.format,
            "size_bytes": image.size_bytes, "path": str(image.path.resolve()), "created_at": utcnow()}])
        existing = session.execute(select(Image.id).where(Image.sha256 == image.sha256)).scalar_one()
    store.insert_ignore(session, ImageName.__table__, [{"name": name or image.path.name, "image_id": existing}])
    return existing, added


def attach_images(store: Store, session: Session, dataset: str, images: dict[str, ImageFile]) -> tuple[int, int]:
    """Give the dataset's source questions that lack an image the files found for their names.

    Returns (images added to the store, source questions that got an image).
    """
    missing = session.execute(
        select(SourceQuestion.id, SourceQuestion.image_ref)
        .where(SourceQuestion.dataset == dataset, SourceQuestion.image_id.is_(None))
    ).all()
    ids: dict[str, int] = {}
    added = 0
    filled = 0
    for source_id, ref in missing:
        image = images.get(ref)
        if image is None:
            continue
        if ref not in ids:
            ids[ref], new = register_image(store, session, image, name=ref)
            added += new
        session.execute(SourceQuestion.__table__.update()
                        .where(SourceQuestion.__table__.c.id == source_id).values(image_id=ids[ref]))
        filled += 1
    return added, filled


def strings_in(value: Any) -> list[str]:
    """Every string in VALUE, in a fixed order (dict keys sorted)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in strings_in(v)]
    if isinstance(value, dict):
        return [s for k in sorted(value) for s in strings_in(value[k])]
    return []


def data_image_shas(data: Any) -> list[str]:
    """SHA-256s of the further images an item names in its data as `sha256:<hex>`, in a fixed order."""
    found: dict[str, None] = {}
    for text in strings_in(data):
        match = STORE_IMAGE_REF.match(text)
        if match:
            found.setdefault(match.group(1))
    return list(found)


def data_uri(path: Path) -> str:
    """The file as a `data:` URI (images embedded in a Label Studio task or an API request)."""
    mime = mimetypes.guess_type(Path(path).name)[0] or "image/png"
    return f"data:{mime};base64,{base64.b64encode(Path(path).read_bytes()).decode('ascii')}"


def save_png(image: PIL.Image.Image, folder: Path, made: Optional[list[Path]] = None) -> Path:
    """Write IMAGE under its content hash (PNG bytes are deterministic for the same pixels); a file this call
    created is added to MADE (to remove again if the store cannot record it)."""
    import hashlib
    import io

    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    blob = buffer.getvalue()
    sha = hashlib.sha256(blob).hexdigest()
    path = folder / sha[:2] / f"{sha}.png"
    if not path.exists():
        write_atomically(path, blob)
        if made is not None:
            made.append(path)
    return path


class StoreImageCache:
    """The store's request cache for image APIs: a request key -> the SHA-256s of the images it returned (files
    under the workspace's generated images); an entry whose files are gone is a miss."""

    backend = IMAGE_CACHE_BACKEND

    def __init__(self, store: Store, folder: Path) -> None:
        self.store, self.folder = store, folder

    def get(self, key: str) -> Optional[list]:
        from cftools.llm.cache import cached_completions

        hit = cached_completions(self.store, [key]).get(key)
        if hit is None:
            return None
        paths = [self.folder / sha[:2] / f"{sha}.png" for sha in json.loads(hit.text)]
        if not all(p.is_file() for p in paths):
            return None
        import PIL.Image

        return [PIL.Image.open(p).convert("RGB") for p in paths]

    def put(self, key: str, images: list) -> None:
        from cftools.llm.base import Completion
        from cftools.llm.cache import save_completions

        shas = [save_png(image, self.folder).stem for image in images]
        with self.store.write() as session:
            save_completions(session, self.backend, "images", [(key, Completion(text=json.dumps(shas)))])
