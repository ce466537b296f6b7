"""Splits: plain names, `--splits` parsing, and the hash that assigns every item its split.

Splits are decided by a hash, so they are stable under re-export. Items that share an image are grouped
(connected components over their images) and a group's split is decided by the hash of the smallest image
SHA-256 in it, so no image is in two splits. An item without an image is decided by the hash of its id.
"""

from __future__ import annotations

import hashlib
import re

from cftools.errors import CftoolsError

DEFAULT_SPLITS = {"test": 1.0}
PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")


def check_plain_name(value: str, what: str) -> str:
    """A name that becomes part of a file name: letters, digits, . _ + -; no path, no '..'."""
    if not PLAIN_NAME.match(value) or ".." in value:
        raise CftoolsError(f"{what} {value!r} is not a plain name (letters, digits, '.', '_', '+', '-'; "
                           "no '/' or '..')")
    return value


def parse_splits(text: str | None) -> dict[str, float]:
    """`test=0.8,dev=0.2` -> {"test": 0.8, "dev": 0.2} (in the given order; fractions sum to 1)."""
    if not text:
        return dict(DEFAULT_SPLITS)
    splits: dict[str, float] = {}
    for part in text.split(","):
        name, sep, fraction = part.partition("=")
        name = check_plain_name(name.strip(), "split name")
        try:
            value = float(fraction) if sep else float("nan")
        except ValueError:
            value = float("nan")
        if not (0 < value <= 1):
            raise CftoolsError(f"split {part!r}: write NAME=FRACTION with a fraction in (0, 1], e.g. test=0.8,dev=0.2")
        if name in splits:
            raise CftoolsError(f"split {name!r} is given twice")
        splits[name] = value
    if abs(sum(splits.values()) - 1.0) > 1e-6:
        raise CftoolsError(f"split fractions must add up to 1 (they add up to {sum(splits.values()):g})")
    return splits


def hash_fraction(text: str) -> float:
    """A stable number in [0, 1) from TEXT (SHA-256, so the same on every machine and run)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2**64


def choose_split(splits: dict[str, float], text: str) -> str:
    point = hash_fraction(text)
    edge = 0.0
    names = list(splits)
    for name in names:
        edge += splits[name]
        if point < edge:
            return name
    return names[-1]
