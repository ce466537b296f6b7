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

from cftools.errors import CftoolsError, naming_the_file
from cftools.processes import is_running


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


def aside_name(target: Path, old: Path, verified: bool) -> Path:
    """Where a `.old` copy is moved aside: beside TARGET, visible, named after the killed export's process."""
    pid = re.search(r"\.pid(\d+)\.", old.name)
    base = f"{target.name}.{'kept' if verified else 'unverified'}-pid{pid.group(1) if pid else 'x'}"
    candidate, n = target.parent / base, 1
    while candidate.exists():
        candidate, n = target.parent / f"{base}-{n}", n + 1
    return candidate


def clear_stale_temporaries(target: Path) -> list[tuple[Path, str]]:
    """Clear what a killed export of TARGET left: (folder, what was done) for each. A `.tmp` folder is a half-written
    export and is removed. A `.old` folder holds a previous release while a replacing export renames; each such copy
    is verified against its own manifest first. When TARGET is missing the newest copy that verifies is renamed back
    to TARGET ("restored"); every other copy that holds a release is moved aside beside it ("moved aside to PATH"),
    never deleted: a copy that verifies is a release, and one that does not is for a person to judge."""
    done = []
    stale = stale_temporaries(target)
    copies = [p for p in stale if p.name.endswith(".old") and (p / "release").is_dir()]
    verifying = sorted((p for p in copies if copy_verifies(p / "release")),
                       key=lambda p: ((p / "release").stat().st_mtime, p.name), reverse=True)
    if verifying and not target.exists():
        newest = verifying.pop(0)
        os.rename(newest / "release", target)
        shutil.rmtree(newest, ignore_errors=True)
        done.append((newest, "restored"))
    for path in stale:
        if any(path == d for d, _ in done):
            continue
        if path in copies:
            aside = aside_name(target, path, path in verifying)
            os.rename(path / "release", aside)
            shutil.rmtree(path, ignore_errors=True)
            done.append((path, f"moved aside to {aside}" + ("" if path in verifying else
                                                              " (it does not verify against its manifest)")))
        else:
            shutil.rmtree(path, ignore_errors=True)
            done.append((path, "removed"))
    return done


def atomic_release(target: Path, force: bool, write: Callable[[Path], None]) -> list[str]:
    """Run WRITE on a temporary folder beside TARGET, then rename it into place. The temporary folder
    is named after this process, so a later export removes it if this one is killed. Returns what clearing a killed
    export's temporaries did, one line each."""
    if target.exists() and not force:
        raise CftoolsError(f"{target} already exists; pass --force to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    cleared = [f"{path}: {action}" + (f" as {target}" if action == "restored" else "")
               for path, action in clear_stale_temporaries(target)]
    if target.exists() and not force:  # a verified copy came back: replacing it needs --force like any release
        raise CftoolsError(f"{target} was restored from the copy a killed export left ({'; '.join(cleared)}); "
                           "pass --force to replace it")
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
