"""Prompt templates for the generators: a packaged Jinja2 file, a workspace's copy of it, or a user's file.

The SHA-256 of the template's source goes into every generation's provenance, so an edited copy is traceable;
`name` is the packaged name (`rewrite/boolean.j2`) or, for a workspace copy or a user's file, its path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from jinja2 import Environment, FileSystemLoader, StrictUndefined, TemplateError

from cftools.errors import InputError
from cftools.resources import packaged_dir, sha256_text, template_path


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    source: str
    hash: str
    template: Any

    def render(self, **variables: Any) -> str:
        return self.template.render(**variables).strip() + "\n"


def load_prompt(relative: str, path: Optional[Path] = None, workspace_root: Optional[Path] = None) -> PromptTemplate:
    """The prompt RELATIVE under prompts/ (the workspace's copy wins), or the user's template file PATH."""
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
