"""The documentation (issue 39): every command and every option of the CLI is documented in docs/ (a page that
names `cftools <command path>` also names each of its long options), every setting cftools.toml's schema declares
is in docs/config.md, and the links of the README and of the docs pages lead to files that exist."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from cftools.cli import main
from cftools.config import SECTIONS, known_sections

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = {path: path.read_text(encoding="utf-8") for path in sorted(DOCS.rglob("*.md"))}
LINK = re.compile(r"\]\(([^)\s]+)\)")


def commands(command: click.Command, path: tuple[str, ...] = ("cftools",)):
    """(path, command) for the root and every command below it; groups are named through their commands."""
    if not isinstance(command, click.Group) or len(path) == 1:
        yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):  # the lazily imported commands too
            yield from commands(command.get_command(ctx, name), path + (name,))


def long_options(command: click.Command) -> list[str]:
    return [flag for param in command.params if isinstance(param, click.Option)
            for flag in param.opts + param.secondary_opts if flag.startswith("--") and flag != "--help"]


def mentions(text: str, path: str) -> bool:
    """TEXT names the command PATH (not merely a longer one that starts with it)."""
    return re.search(re.escape(path) + r"(?![\w-])", text) is not None


COMMANDS = list(commands(main))


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_and_option_is_documented(path, command):
    name = " ".join(path)
    pages = [text for text in PAGES.values() if mentions(text, name)]
    assert pages, f"no page in docs/ names `{name}`"
    missing = [flag for flag in long_options(command) if not any(re.search(re.escape(flag) + r"(?![\w-])", text)
                                                                 for text in pages)]
    assert not missing, f"docs/: the pages that name `{name}` do not document {missing}"


def test_every_setting_of_the_schema_is_in_config_md():
    text = PAGES[DOCS / "config.md"]
    for section, model in known_sections().items():
        assert f"## [{section}]" in text, f"docs/config.md has no [{section}] section"
        start = text.index(f"## [{section}]")
        end = text.find("\n## ", start + 1)
        body = text[start:end if end > 0 else None]
        for key in model.model_fields:
            if key not in ("prices", "people"):  # tables of their own, each with its section
                assert f"| `{key}` |" in body, f"docs/config.md: [{section}] {key} is not documented"
    for header, model in (('## [llm.prices."MODEL"]', SECTIONS["llm"].model_fields["prices"]),
                          ('## [label_studio.people."EMAIL"]', SECTIONS["label_studio"].model_fields["people"])):
        assert header in text, f"docs/config.md has no {header} section"
        body = text[text.index(header):].split("\n## ")[0]
        entry = model.annotation.__args__[0].__args__[1]  # Optional[dict[str, Entry]] -> Entry
        for key in entry.model_fields:
            assert f"| `{key}` |" in body, f"docs/config.md: {header[3:]} {key} is not documented"


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_links_lead_to_files_that_exist(page):
    text = page.read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        file = (page.parent / target.split("#")[0]).resolve()
        assert file.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"


def test_the_readme_is_a_short_tour_that_links_every_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 100, "the README is a tour: put reference text into docs/"
    assert "make demo" in readme and "make test" in readme
    linked = {(ROOT / target.split("#")[0]).resolve() for target in LINK.findall(readme)}
    assert not set(PAGES) - linked, f"pages the README does not link: {sorted(set(PAGES) - linked)}"
