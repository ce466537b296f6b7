"""Images leave without their metadata: a photo's EXIF can name its author (Artist, Copyright, XPAuthor), where it
was taken (GPS) and the file it came from (ImageDescription), a PNG's text chunks the same; none of it is the image.

JPEG and PNG files are released with their metadata segments and chunks cut out, byte for byte otherwise (the
pixels are not decoded again, so nothing is lost): what stays is what draws the image — JPEG's JFIF header, ICC
colour profile, Adobe colour transform and, in an EXIF of its own with nothing else, the orientation; PNG's critical
chunks, palette, transparency, colour and physical-size chunks, animation and, in an eXIf of its own, the
orientation. Everything after the image's end
(a phone's trailer, an MPO's further frames) is cut too. A file without such metadata is released unchanged (same
SHA-256). Other formats (GIF, WebP, TIFF, BMP) are released as they are, and the personal-data scan refuses one
that carries XMP, IPTC, a comment or an EXIF tag naming a person, a place, a machine or a file (convert it to PNG
before ingest)."""

from __future__ import annotations

import io
import struct
import zlib
from typing import Optional

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_SOI = b"\xff\xd8"
ORIENTATION = 0x0112
EXIF_HEADER = b"Exif\x00\x00"
# PNG ancillary chunks that draw the image; any other ancillary chunk (tEXt, zTXt, iTXt, eXIf, tIME, a private
# one) is metadata. Critical chunks (upper-case first letter) always stay.
PNG_KEPT = {b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"iCCP", b"sBIT", b"pHYs", b"bKGD", b"hIST", b"cICP", b"mDCV",
            b"cLLI", b"acTL", b"fcTL", b"fdAT"}
# JPEG application segments that draw the image, by marker and the start of their payload
JPEG_KEPT = {0xE0: (b"JFIF\x00", b"JFXX\x00"), 0xE2: (b"ICC_PROFILE\x00",), 0xEE: (b"Adobe",)}
JPEG_STANDALONE = {0x01, *range(0xD0, 0xD8)}
PNG_NAMES = {b"tEXt": "text", b"zTXt": "text", b"iTXt": "text", b"eXIf": "EXIF", b"tIME": "time"}
OTHER_FORMAT_KEYS = {"xmp": "XMP", "XML:com.adobe.xmp": "XMP", "comment": "comment", "iptc": "IPTC"}
# EXIF tags (TIFF's own among them) that name a person, a place, a machine or a file
PERSONAL_TAGS = {0x010D: "DocumentName", 0x010E: "ImageDescription", 0x013B: "Artist", 0x013C: "HostComputer",
                 0x8298: "Copyright", 0x83BB: "IPTC", 0x02BC: "XMP", 0x8825: "GPS", 0x9286: "UserComment",
                 0x9C9B: "XPTitle", 0x9C9C: "XPComment", 0x9C9D: "XPAuthor", 0x9C9E: "XPKeywords",
                 0x9C9F: "XPSubject", 0xA430: "CameraOwnerName", 0xA431: "BodySerialNumber"}


class ImageMetadataError(ValueError):
    """The file's structure could not be followed: it is released only when it carries no metadata."""


def without_metadata(data: bytes) -> tuple[bytes, list[str]]:
    """DATA without its metadata (see the module docstring), and the names of what was cut (empty: unchanged)."""
    if data.startswith(PNG_SIGNATURE):
        return png_without_metadata(data)
    if data.startswith(JPEG_SOI):
        return jpeg_without_metadata(data)
    return data, []


def metadata_found(data: bytes) -> list[str]:
    """The metadata a released image must not carry (empty when none): what `without_metadata` would cut, or, for a
    format it does not cut, the EXIF, XMP or comment Pillow finds."""
    if data.startswith((PNG_SIGNATURE, JPEG_SOI)):
        try:
            return without_metadata(data)[1]
        except ImageMetadataError as exc:
            return [f"a structure cftools cannot follow ({exc})"]
    return other_format_metadata(data)


def other_format_metadata(data: bytes) -> list[str]:
    """What a GIF, WebP, TIFF or BMP carries that tells of a person: XMP, a comment, IPTC, and the EXIF tags that
    name someone, a place or a file (a TIFF's other tags describe its pixels)."""
    import PIL.Image

    try:
        with PIL.Image.open(io.BytesIO(data)) as image:
            found = [name for key, name in OTHER_FORMAT_KEYS.items() if image.info.get(key)]
            exif = image.getexif()
            found += [f"EXIF {PERSONAL_TAGS[tag]}" for tag in sorted(PERSONAL_TAGS) if exif.get(tag)]
            fmt = image.format or "image"
    except (OSError, ValueError, SyntaxError):
        return []  # not an image: the images check says so
    return [f"{name} ({fmt}: cftools cannot cut it; convert the image to PNG)" for name in dict.fromkeys(found)]


# ---------------------------------------------------------------- PNG


def png_without_metadata(data: bytes) -> tuple[bytes, list[str]]:
    out, cut, pos = [PNG_SIGNATURE], [], len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        end = pos + 12 + length
        if end > len(data):
            raise ImageMetadataError(f"PNG chunk {kind!r} runs past the end of the file")
        chunk = data[pos:end]
        kept = chunk if kind[:1].isupper() or kind in PNG_KEPT else png_orientation_chunk(chunk)
        if kept is not None:
            out.append(kept)
        if kept != chunk:
            cut.append(PNG_NAMES.get(kind, f"PNG chunk {kind.decode('latin-1')}"))
        pos = end
        if kind == b"IEND":
            break
    if pos < len(data):
        cut.append("bytes after the image's end")
    return b"".join(out), list(dict.fromkeys(cut))


def png_orientation_chunk(chunk: bytes) -> Optional[bytes]:
    """An eXIf chunk holding the orientation and nothing else, for an eXIf chunk that turns the image; else None."""
    if chunk[4:8] != b"eXIf":
        return None
    orientation = exif_orientation(EXIF_HEADER + chunk[8:-4])
    if orientation in (None, 1):
        return None
    payload = orientation_exif(orientation)[len(EXIF_HEADER):]
    body = b"eXIf" + payload
    return struct.pack(">I", len(payload)) + body + struct.pack(">I", zlib.crc32(body))


# ---------------------------------------------------------------- JPEG


def jpeg_without_metadata(data: bytes) -> tuple[bytes, list[str]]:
    out, cut, pos = [JPEG_SOI], [], 2
    while pos < len(data):
        if data[pos] != 0xFF:  # stray bytes between segments, which decoders skip (as Pillow does): not the image
            following = data.find(b"\xff", pos)
            if following < 0:
                raise ImageMetadataError(f"no JPEG marker after byte {pos}")
            cut.append("bytes between segments")
            pos = following
            continue
        marker = data[pos + 1] if pos + 1 < len(data) else None
        if marker is None:
            raise ImageMetadataError("the file ends inside a marker")
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in JPEG_STANDALONE:
            out.append(data[pos:pos + 2])
            pos += 2
            continue
        if marker == 0xD9:  # the image's end: what follows is not the image
            out.append(data[pos:pos + 2])
            if pos + 2 < len(data):
                cut.append("bytes after the image's end")
            break
        if pos + 4 > len(data):
            raise ImageMetadataError("the file ends inside a segment")
        end = pos + 2 + struct.unpack(">H", data[pos + 2:pos + 4])[0]
        if end > len(data):
            raise ImageMetadataError(f"a JPEG segment at byte {pos} runs past the end of the file")
        segment = data[pos:end]
        kept, what = jpeg_segment_kept(marker, segment)
        if kept is not None:
            out.append(kept)
        if what:
            cut.append(what)
        pos = end
        if marker == 0xDA:  # a scan: its entropy-coded data runs to the next marker that is not a restart
            scan_end = entropy_end(data, pos)
            out.append(data[pos:scan_end])
            pos = scan_end
    return b"".join(out), list(dict.fromkeys(cut))


def jpeg_segment_kept(marker: int, segment: bytes) -> tuple[Optional[bytes], Optional[str]]:
    """What of one JPEG segment is released (None: nothing), and the name of what was cut (None: nothing)."""
    payload = segment[4:]
    if marker == 0xFE:
        return None, "comment"
    if marker == 0xE1 and payload.startswith(EXIF_HEADER):
        orientation = exif_orientation(payload)
        kept = orientation_segment(orientation) if orientation not in (None, 1) else None
        return kept, (None if kept == segment else "EXIF")
    if 0xE0 <= marker <= 0xEF:
        if any(payload.startswith(start) for start in JPEG_KEPT.get(marker, ())):
            return segment, None
        return None, "XMP" if payload.startswith(b"http://ns.adobe.com/") else f"APP{marker - 0xE0} segment"
    return segment, None


def entropy_end(data: bytes, pos: int) -> int:
    while True:
        pos = data.find(b"\xff", pos)
        if pos < 0 or pos + 1 >= len(data):
            return len(data)
        following = data[pos + 1]
        if following == 0x00 or 0xD0 <= following <= 0xD7 or following == 0xFF:
            pos += 1
            continue
        return pos


def exif_orientation(payload: bytes) -> Optional[int]:
    import PIL.Image

    exif = PIL.Image.Exif()
    try:
        exif.load(payload)
    except (OSError, ValueError, SyntaxError, struct.error):
        return None
    value = exif.get(ORIENTATION)
    return value if isinstance(value, int) and 1 <= value <= 8 else None


def orientation_exif(orientation: int) -> bytes:
    """EXIF (with its `Exif\\0\\0` header) that holds the orientation and nothing else: how the image is turned."""
    import PIL.Image

    exif = PIL.Image.Exif()
    exif[ORIENTATION] = orientation
    return exif.tobytes()


def orientation_segment(orientation: int) -> bytes:
    """An APP1 segment whose EXIF holds the orientation and nothing else."""
    payload = orientation_exif(orientation)
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
