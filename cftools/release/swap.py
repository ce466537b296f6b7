"""Putting a release folder in place atomically.

The release is written to a hidden temporary folder beside the target and renamed into place only when complete,
so a failed or killed export leaves no partial release; an existing release is replaced only with `force`.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from cftools.errors import CftoolsError, Hint, naming_the_file
from cftools.processes import is_running

FORCE_HINT = Hint("{message}; pass {force} to replace it", force="--force")


def stale_temporaries(target: Path) -> list[Path]:
    """Temporary folders of TARGET left by an export that was killed (its process is gone)."""
    stale = []
    for path in sorted(target.parent.glob(f".{target.name}.pid*")):
        match = re.match(rf"^\.{re.escape(target.name)}\.pid(\d+)\.", path.name)
        if match and path.is_dir() and not is_running(int(match.group(1))):
            stale.append(path)
    return stale


def copy_verifies(folder: Path) -> bool:
    """Whether FOLDER is a complete release: every file as its own manifest says (`cftools verify`)."""
    from cftools.release.verify import verify_release

    try:
        return verify_release(folder).ok
    except (CftoolsError, OSError, ValueError):
        return False


# What a copy a killed export left is, as the name it is kept under says: the release the store recorded; one that
# verifies against its own manifest but whose manifest the store did not record (an earlier export of the same
# release, whose record the next export replaced, or files and manifest rewritten together: only a person can tell);
# one of a release the store has no manifest for; and one that does not verify at all.
RECORDED, NOT_RECORDED, UNRECORDED, BROKEN = "kept", "unrecorded", "unverified", "broken"
WHY = {RECORDED: "its manifest is the one the store recorded",
       NOT_RECORDED: "it verifies against its own manifest, but that manifest is not the one the store recorded: an "
                     "earlier export, or files rewritten together with their manifest",
       UNRECORDED: "it verifies against its own manifest, but the store recorded no manifest to check it against",
       BROKEN: "it does not verify against its manifest"}


def copy_state(folder: Path, recorded: set[str]) -> str:
    """What the release copy FOLDER is, judged by the store's RECORDED manifest SHA-256s for its target."""
    from cftools.release.layout import MANIFEST_NAME, hash_file

    if not copy_verifies(folder):
        return BROKEN
    if not recorded:
        return UNRECORDED
    return RECORDED if hash_file(folder / MANIFEST_NAME) in recorded else NOT_RECORDED


def release_copy(path: Path) -> Path | None:
    """The release folder a killed export's temporary PATH holds: `.old/release`, or a `.tmp` folder with a
    manifest (written last, so the export finished writing it); None for a half-written export."""
    from cftools.release.layout import MANIFEST_NAME

    if path.name.endswith(".old"):
        return path / "release" if (path / "release").is_dir() else None
    return path if (path / MANIFEST_NAME).is_file() else None


def describe_temporary(path: Path, target: Path, recorded: set[str]) -> str:
    """What a killed export's temporary PATH is, in words (`doctor`'s release_temporary)."""
    copy = release_copy(path)
    if copy is None:
        return f"{path} is a half-written export left by a killed run"
    state = copy_state(copy, recorded)
    held = ("an earlier copy" if path.name.endswith(".old") else "a finished export") if target.exists() \
        else "the only copy"
    return f"{path} holds {held} of {target} (an export was killed before its rename); {WHY[state]}"


def aside_name(target: Path, old: Path, state: str) -> Path:
    """Where a copy is moved aside: beside TARGET, visible, named for what it is and the killed export's process."""
    pid = re.search(r"\.pid(\d+)\.", old.name)
    base = f"{target.name}.{state}-pid{pid.group(1) if pid else 'x'}"
    candidate, n = target.parent / base, 1
    while candidate.exists():
        candidate, n = target.parent / f"{base}-{n}", n + 1
    return candidate


def clear_stale_temporaries(target: Path, recorded: set[str]) -> list[tuple[Path, str]]:
    """Clear what a killed export of TARGET left: (folder, what was done and why) for each. RECORDED holds the
    manifest SHA-256s the store recorded for TARGET. Only a copy whose manifest is one of them (and that verifies)
    is trusted: when TARGET is missing, the newest such copy is renamed back to TARGET ("restored"). Every other
    `.old` copy is moved aside beside TARGET under a name that says what it is (`.kept`, `.unrecorded`, `.unverified`,
    `.broken`), never deleted: only a person knows what an untrusted copy is. A `.tmp` folder not restored is an
    export the rerun writes again and is removed."""
    done = []
    stale = stale_temporaries(target)
    copies = {p: c for p in stale if (c := release_copy(p)) is not None}
    states = {p: copy_state(c, recorded) for p, c in copies.items()}
    trusted = sorted((p for p in copies if states[p] == RECORDED),
                     key=lambda p: (copies[p].stat().st_mtime, p.name), reverse=True)
    if trusted and not target.exists():
        newest = trusted[0]
        os.rename(copies[newest], target)
        shutil.rmtree(newest, ignore_errors=True)
        done.append((newest, f"restored ({WHY[RECORDED]})"))
    for path in stale:
        if any(path == d for d, _ in done):
            continue
        if path in copies and path.name.endswith(".old"):
            aside = aside_name(target, path, states[path])
            os.rename(copies[path], aside)
            shutil.rmtree(path, ignore_errors=True)
            done.append((path, f"moved aside to {aside} ({WHY[states[path]]})"))
        else:
            shutil.rmtree(path, ignore_errors=True)
            done.append((path, "removed" + (f" ({WHY[states[path]]}; the export is written again when rerun)"
                                            if path in copies else " (a half-written export)")))
    return done


def cleared_line(path: Path, action: str, target: Path) -> str:
    """One line of what clearing a killed export's temporary PATH did."""
    if action.startswith("restored"):
        return f"{path}: restored as {target} {action.removeprefix('restored ')}"
    return f"{path}: {action}"


def atomic_release(target: Path, force: bool, write: Callable[[Path], None], recorded: set[str]) -> list[str]:
    """Run WRITE on a temporary folder beside TARGET, then rename it into place. The temporary folder
    is named after this process, so a later export removes it if this one is killed. Returns what clearing a killed
    export's temporaries did (RECORDED: the store's manifest SHA-256s for TARGET), one line each."""
    if target.exists() and not force:
        raise CftoolsError(f"{target} already exists", hint=FORCE_HINT)
    target.parent.mkdir(parents=True, exist_ok=True)
    cleared = [cleared_line(path, action, target) for path, action in clear_stale_temporaries(target, recorded)]
    if target.exists() and not force:  # a verified copy came back: replacing it needs --force like any release
        raise CftoolsError(f"{target} was restored from the copy a killed export left ({'; '.join(cleared)})",
                           hint=FORCE_HINT)
    prefix = f".{target.name}.pid{os.getpid()}."
    tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=target.parent))
    old = None
    try:
        os.chmod(tmp, 0o755)
        with naming_the_file(target):  # a write that ran out of space names the release, not a temporary file
            write(tmp)
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=prefix, suffix=".old", dir=target.parent))
            os.rename(target, old / "release")
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and (old / "release").exists() and not target.exists():
            os.rename(old / "release", target)  # put the previous release back
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return cleared
