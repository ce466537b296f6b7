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


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_temporaries(target: Path) -> list[Path]:
    """Temporary folders of TARGET left by an export that was killed (its process is gone)."""
    stale = []
    for path in sorted(target.parent.glob(f".{target.name}.pid*")):
        match = re.match(rf"^\.{re.escape(target.name)}\.pid(\d+)\.", path.name)
        if match and path.is_dir() and not _process_alive(int(match.group(1))):
            stale.append(path)
    return stale


def clear_stale_temporaries(target: Path) -> list[tuple[Path, str]]:
    """Clear what a killed export of TARGET left: (folder, "removed" or "restored") for each. A `.old` folder holds
    the previous release while a replacing export renames; when TARGET is missing it is the only copy, so it is
    renamed back to TARGET, never removed."""
    done = []
    stale = stale_temporaries(target)
    for path in sorted(stale, key=lambda p: not p.name.endswith(".old")):  # restore before removing
        kept = path / "release"
        if path.name.endswith(".old") and kept.is_dir() and not target.exists():
            os.rename(kept, target)
            shutil.rmtree(path, ignore_errors=True)
            done.append((path, "restored"))
        else:
            shutil.rmtree(path, ignore_errors=True)
            done.append((path, "removed"))
    return done


def atomic_release(target: Path, force: bool, write: Callable[[Path], None]) -> None:
    """Run WRITE on a temporary folder beside TARGET, then rename it into place. The temporary folder
    is named after this process, so a later export removes it if this one is killed."""
    if target.exists() and not force:
        raise CftoolsError(f"{target} already exists; pass --force to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    clear_stale_temporaries(target)
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
