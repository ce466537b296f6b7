"""What leaves the workspace: people only as keyed pseudonyms, and no local absolute paths.

Everything a release holds (records, Parquet, the kinds' peer formats, browse.html, croissant.json, the data card,
the harness exports, annotation_analysis.json) is made from what `Boundary.released` returns, and eval reports name
models through `public_spec`. `cftools.release.scan` then reads every file of the release with `Boundary.findings`
and refuses one that still holds personal data.

- **Pseudonyms.** A person (an email, as Label Studio names them) becomes `annotator-<12 hex>`: the first 48 bits
  of HMAC-SHA256 under the workspace's own secret, 32 random bytes made once in `.cftools/pseudonym-key` (mode
  0600; never in the store, the config, a release or a log). The same workspace gives a person the same id in
  every release; hashing a list of guessed emails gives nothing without the key. A copy of the workspace that
  should release the same ids needs the key file too.
- **People** are the emails the store judged or assigned with and the configured ones (`[label_studio.people]`,
  `[label_studio] annotators`): such an email, or any string that is an email address, becomes its pseudonym
  wherever it is a whole value or a key; one inside a text becomes its pseudonym in place. Who waived a flag
  (`data.waived_flags[CODE].by`, any name) is a pseudonym too.
- **Paths.** A value that is an absolute path (a model folder, an image's source file) becomes its last part;
  a local path inside a text (under /home, /root, /Users, /tmp, a drive letter, the workspace; a home below another
  root too, /nfs/home/NAME) becomes its last part.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any, Optional

from cftools.errors import CftoolsError
from cftools.personal_data import EMAIL

if TYPE_CHECKING:
    from cftools.workspace import Workspace

PSEUDONYM_PREFIX = "annotator-"
PSEUDONYM_HEX = 12
KEY_DIR = ".cftools"
KEY_NAME = "pseudonym-key"
WAIVERS = "waived_flags"  # cftools.flags.WAIVED: an item's waivers, each with the person who made it (`by`)

# A path of this machine's people or temporaries, not inside a URL or another path (nor in base64 text: its
# characters come before such a slash). `file://` URLs too. The people's folders may lie below another root (a
# cluster's /nfs/home/NAME, WSL's /mnt/c/Users/NAME): the whole path from its first slash.
LOCAL_PATH = re.compile(
    r"(?:(?<=file://)|(?<![\w+/.~%-]))(?:(?:/[\w.~-]+)*?/(?:home|root|Users|tmp|var/tmp|var/folders|private/var)/"
    r"|[A-Za-z]:[\\/])[^\s\"'<>|`*]*")
_PATH_END = r"(?![\w.-])"
_SPACE = re.compile(r"\s")


def person_key(name: str) -> str:
    """How a person's name is compared: stripped, lower case (Label Studio's emails are case-insensitive)."""
    return name.strip().lower()


def mask_email(email: str) -> str:
    """An email shown without giving it away: its first letter and its domain (a…@example.com)."""
    local, _, domain = email.partition("@")
    return f"{local[:1]}…@{domain}"


def path_root(path: str) -> str:
    """The start of a path shown without the rest of it (/home/…, C:\\…)."""
    match = re.match(r"(/(?:var/tmp|var/folders|private/var|[^/\\]+)|[A-Za-z]:)", path)
    return (match.group(1) if match else path[:8]) + ("\\…" if re.match(r"[A-Za-z]:\\", path) else "/…")


def is_absolute_path(text: str) -> bool:
    """TEXT is one absolute file path (POSIX, a drive letter, ~/, file://): no spaces, at least one name."""
    if not text or not (text[0] in "/~f" or text[1:2] == ":") or len(text) > 4096 or _SPACE.search(text):
        return False
    if text.startswith("file://"):
        return True
    if text.startswith("~/"):
        return len(text) > 2
    if re.match(r"[A-Za-z]:[\\/]\w", text):
        return True
    return text.startswith("/") and not text.startswith("//") and re.match(r"/[\w.~-]", text) is not None


def path_name(text: str) -> str:
    """The last part of a path (a model folder by its name): what a release may say of it."""
    text = text.removeprefix("file://")
    pure = PureWindowsPath(text) if re.match(r"[A-Za-z]:[\\/]", text) else PurePosixPath(text)
    return pure.name or str(pure)


def public_name(value: Optional[str]) -> Optional[str]:
    """How a release or a report names a model or file given as a path: an id as given (`org/model`), a local
    folder (absolute, ~/ or relative to . or ..) by its name only."""
    if not value:
        return value
    text = str(value)
    return path_name(text) if is_absolute_path(text) or text.startswith(".") else text


def public_spec(spec: Optional[str]) -> Optional[str]:
    """A model spec (`hf:/models/qwen`, `openai:gpt-4o`, `blind:openai:/models/qwen` of a server that names its
    model by its folder, as vLLM does) as a report shows it: a local folder by its name."""
    if not spec:
        return spec
    match = re.match(r"([a-z][a-z0-9_-]+):(.+)", str(spec))
    return f"{match.group(1)}:{public_spec(match.group(2))}" if match else public_name(str(spec))


def keyed_pseudonym(key: bytes, person: str) -> str:
    """PERSON's id under KEY: the first 48 bits of HMAC-SHA256 of their `person_key`, as `annotator-<12 hex>`."""
    digest = hmac.new(key, person_key(person).encode("utf-8"), hashlib.sha256).hexdigest()
    return PSEUDONYM_PREFIX + digest[:PSEUDONYM_HEX]


# ---------------------------------------------------------------- the workspace's key


def key_path(root: Path) -> Path:
    return Path(root) / KEY_DIR / KEY_NAME


def workspace_key(root: Path) -> bytes:
    """The workspace's pseudonym key, made (once, 0600) when it has none. Two processes making it at once agree:
    the file appears whole under its name (a hard link) or not at all, and the loser reads the winner's."""
    path = key_path(root)
    if not path.is_file():
        path.parent.mkdir(mode=0o700, exist_ok=True)
        temporary = path.parent / f".{KEY_NAME}.{os.getpid()}.{secrets.token_hex(4)}"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "w", encoding="ascii") as fh:
                fh.write(secrets.token_hex(32) + "\n")
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass
        finally:
            temporary.unlink(missing_ok=True)
    text = path.read_text(encoding="ascii", errors="replace").strip()
    if not re.fullmatch(r"[0-9a-f]{64}", text):
        raise CftoolsError(f"{path} is not a pseudonym key (64 hex digits); restore it from a copy of the workspace, "
                           "or delete it to make a new one (every person then gets new ids in later releases)")
    return bytes.fromhex(text)


# ---------------------------------------------------------------- the boundary


@dataclass
class Boundary:
    """Where people become pseudonyms and paths their names (see the module docstring). ROOT: the workspace (its
    key is read or made at the first pseudonym); PEOPLE: the emails to turn into pseudonyms, compared by
    `person_key` (other names are left: people are named by email); OWN_PATHS: this machine's folders a release
    must not name (the workspace, the home folder)."""

    root: Optional[Path] = None
    people: frozenset[str] = frozenset()
    own_paths: tuple[str, ...] = ()
    _key: Optional[bytes] = field(default=None, repr=False)
    _own: Optional[re.Pattern] = field(default=None, repr=False)
    _known: Optional[re.Pattern] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # people are emails (Label Studio's names for them); a bare name such as "b" would match any answer "b"
        self.people = frozenset(person_key(p) for p in self.people if p and "@" in p)
        paths = sorted({p.rstrip("/\\") for p in self.own_paths if len(p.rstrip("/\\")) > 1}, key=len, reverse=True)
        if paths:
            self._own = re.compile(r"(?<![\w.~%-])(?:" + "|".join(re.escape(p) for p in paths)
                                   + r")(?:[/\\][^\s\"'<>|`*]*)?" + _PATH_END)
        emails = sorted(self.people, key=len, reverse=True)
        if emails:
            self._known = re.compile(r"(?<![\w.%+-])(?:" + "|".join(re.escape(e) for e in emails) + r")(?![\w-])",
                                     re.IGNORECASE)

    # ------------------------------------------------------------ pseudonyms

    @property
    def key(self) -> bytes:
        if self._key is None:
            if self.root is None:
                raise CftoolsError("pseudonyms need a workspace (its key): run this in the workspace")
            self._key = workspace_key(self.root)
        return self._key

    def pseudonym(self, person: object) -> str:
        """The person's id in anything released (their email, or a `cftools.person.Person`, which is its email as a
        string): keyed, the same in every release of this workspace."""
        return keyed_pseudonym(self.key, str(person))

    def server_id(self, url: str) -> str:
        """A server's id in anything released: keyed like the people's (an unkeyed hash of a guessable URL, a
        person's host name say, could be reversed)."""
        return hmac.new(self.key, f"server:{url}".encode("utf-8"), hashlib.sha256).hexdigest()[:PSEUDONYM_HEX]

    # ------------------------------------------------------------ what is released

    def released(self, value: Any) -> Any:
        """VALUE (a record, provenance, any JSON value) as it may leave: people as pseudonyms (values and keys),
        paths by their names."""
        if isinstance(value, str):
            return self.released_text(value)
        if isinstance(value, (list, tuple)):
            return [self.released(v) for v in value]
        if isinstance(value, dict):
            released = {(self.released_text(k) if isinstance(k, str) else k): self.released(v)
                        for k, v in value.items()}
            if isinstance(released.get(WAIVERS), dict):
                released[WAIVERS] = self.released_waivers(value[WAIVERS])
            return released
        return value

    def released_waivers(self, waivers: dict[str, Any]) -> dict[str, Any]:
        """An item's `waived_flags`: who waived each flag is a person whatever their name's shape (`CFTOOLS_USER`,
        `[user] name` or the login name), so always a pseudonym."""
        out = {}
        for code, waiver in waivers.items():
            waiver = self.released(waiver)
            if isinstance(waiver, dict) and isinstance(waivers[code].get("by"), str):
                waiver["by"] = self.pseudonym(waivers[code]["by"])
            out[self.released_text(code) if isinstance(code, str) else code] = waiver
        return out

    def released_text(self, text: str) -> str:
        if "@" in text and (person_key(text) in self.people or EMAIL.fullmatch(text.strip())):
            return self.pseudonym(text)
        if ("/" in text or "\\" in text) and is_absolute_path(text):
            return path_name(text)
        if "@" in text:
            if self._known is not None:
                text = self._known.sub(lambda m: self.pseudonym(m.group()), text)
            text = EMAIL.sub(lambda m: self.pseudonym(m.group()), text)
        if "/" in text or "\\" in text:
            if self._own is not None:
                text = self._own.sub(lambda m: path_name(m.group()), text)
            text = LOCAL_PATH.sub(lambda m: path_name(m.group()), text)
        return text

    # ------------------------------------------------------------ what must not be there

    def findings(self, text: str) -> list[tuple[int, str]]:
        """(offset, what) of each piece of personal data in TEXT, in words that do not repeat it in full."""
        found = []
        if "@" in text:
            if self._known is not None:
                found += [(m.start(), f"the email of a person of this workspace ({mask_email(m.group())})")
                          for m in self._known.finditer(text)]
            known = {start for start, _ in found}
            found += [(m.start(), f"an email address ({mask_email(m.group())})") for m in EMAIL.finditer(text)
                      if m.start() not in known]
        if self._own is not None:
            found += [(m.start(), f"a path of this workspace or home folder ({path_root(m.group())})")
                      for m in self._own.finditer(text)]
        taken = {start for start, _ in found}
        found += [(m.start(), f"a local absolute path ({path_root(m.group())})") for m in LOCAL_PATH.finditer(text)
                  if m.start() not in taken]
        return sorted(found)


def outside_boundary() -> Boundary:
    """The boundary without a workspace (a release folder checked on its own): any email, any local path."""
    return Boundary(own_paths=own_paths(None))


def own_paths(root: Optional[Path]) -> tuple[str, ...]:
    """This machine's folders a release must not name: the workspace (as given and resolved) and the home folder."""
    paths = []
    if root is not None:
        paths += [str(root), str(Path(root).resolve())]
    try:
        paths.append(str(Path.home()))
    except RuntimeError:  # no home folder to be found
        pass
    return tuple(p for p in paths if len(p.rstrip("/\\")) > 1)


def workspace_people(workspace: Workspace) -> set[str]:
    """Everyone the workspace knows of: the configured people and annotators, every judge, assignee, person
    measured or paused in the store."""
    from sqlalchemy import select

    from cftools.models import AnnotationTask, Judgment, PersonPause, TaskOutcome

    section = workspace.section("label_studio")
    people = set(section["people"]) if isinstance(section.get("people"), dict) else set()
    people |= {a for a in section.get("annotators") or [] if isinstance(a, str)}
    with workspace.store.session() as session:
        for column in (Judgment.annotator, AnnotationTask.assignee, TaskOutcome.person, PersonPause.person):
            people |= {name for name in session.execute(select(column).distinct()).scalars() if name}
    return people


def workspace_boundary(workspace: Workspace) -> Boundary:
    """The workspace's boundary: its key, everyone it knows of, its own folders."""
    return Boundary(root=workspace.root, people=frozenset(workspace_people(workspace)),
                    own_paths=own_paths(workspace.root))
