"""Prompt templates for the generators: a packaged Jinja2 file, a workspace's copy of it, or a user's file.

The SHA-256 of the template's source goes into every generation's provenance, so an edited copy is traceable;
`name` is the packaged name (`rewrite/boolean.j2`) or, for a workspace copy or a user's file, its path.

A prompt variant (`--prompt-variant NAME`) is a folder of templates beside the default ones
(`prompts/rewrite/terse/boolean.j2` beside `prompts/rewrite/boolean.j2`), or a folder given on the command line
holding files of the same names; the template it gives carries the variant's name (the folder's), which every
generation records (`generations.prompt_variant`; NULL is the default template).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from jinja2 import Environment, FileSystemLoader, StrictUndefined, TemplateError

from cftools.errors import CftoolsError, InputError
from cftools.resources import packaged_dir, search_dirs, sha256_text, template_path


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    source: str
    hash: str
    template: Any
    variant: Optional[str] = None  # the prompt variant's name; None: the generator's default template

    def render(self, **variables: Any) -> str:
        return self.template.render(**variables).strip() + "\n"


DEFAULT_VARIANT = "default"  # how reports name the default template; no variant may take this name


def load_prompt(relative: str, path: Optional[Path] = None, workspace_root: Optional[Path] = None,
                variant: Optional[str] = None) -> PromptTemplate:
    """The prompt RELATIVE under prompts/ (the workspace's copy wins), or the user's template file PATH, or
    RELATIVE's file in the prompt VARIANT (a name or a folder, see `variant_folder`)."""
    if variant is not None:
        if path is not None:
            raise CftoolsError("give a template file or a prompt variant, not both")
        name, folder = variant_folder(Path(relative).parent.as_posix(), variant, workspace_root)
        # named by the variant, never by the folder's path (which may be anywhere); its hash tells copies apart
        return replace(load_prompt(relative, folder / Path(relative).name, workspace_root), variant=name,
                       name=(Path(relative).parent / name / Path(relative).name).as_posix())
    if path is None:
        path = template_path("prompts", relative, workspace_root)
        packaged = path == packaged_dir("prompts") / relative
        name = relative if packaged else str(path)
    else:
        name = str(path)
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "no such template file")
    env = Environment(loader=FileSystemLoader(str(path.parent)), undefined=StrictUndefined, keep_trailing_newline=True)
    # `| json`: an in-context example's reply as the model should write it (keys in the schema's order, unlike
    # Jinja's `tojson`, which sorts them and escapes quotes for HTML)
    env.filters["json"] = lambda value: json.dumps(value, ensure_ascii=False)
    try:
        source = env.loader.get_source(env, path.name)[0]
        template = env.get_template(path.name)
    except TemplateError as exc:
        raise InputError(path, f"not a valid Jinja2 template: {exc}") from None
    return PromptTemplate(name=name, source=source, hash=sha256_text(source), template=template)


def prompt_variants(generator: str, workspace_root: Optional[Path] = None) -> list[str]:
    """The named variants of GENERATOR's prompts: the folders beside its default templates (the workspace's and
    the packaged ones)."""
    return sorted({folder.name for root in search_dirs("prompts", workspace_root)
                   if (root / generator).is_dir() for folder in (root / generator).iterdir()
                   if folder.is_dir() and any(folder.glob("*.j2"))})


def variant_folder(generator: str, variant: str, workspace_root: Optional[Path] = None) -> tuple[str, Path]:
    """The name and folder of VARIANT of GENERATOR's prompts: a folder beside its default templates (the
    workspace's first), else a folder given by its path (named by the folder's name)."""
    for root in search_dirs("prompts", workspace_root):
        if variant and "/" not in variant and (root / generator / variant).is_dir():
            return checked_variant_name(variant), root / generator / variant
    given = Path(variant).expanduser()
    if variant and given.is_dir():
        return checked_variant_name(given.resolve().name), given
    known = prompt_variants(generator, workspace_root)
    raise CftoolsError(f"unknown prompt variant {variant!r} for {generator}: "
                       + (f"use one of {', '.join(known)}" if known else "it has no named variants")
                       + f", or a folder holding {generator}'s templates")


def checked_variant_name(name: str) -> str:
    if name == DEFAULT_VARIANT:
        raise CftoolsError(f"a prompt variant cannot be named {DEFAULT_VARIANT!r} (that is the default template)")
    return name

