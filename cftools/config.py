"""The schema of cftools.toml: every section and key the code reads, declared once and checked when a workspace is
opened.

- A value of the wrong type is one line naming the key, the value and what is expected
  (`cftools.toml: [store] url = [1, 2]: expected a string`), not a traceback from deep inside a stage.
- An unknown key is a warning naming it and the closest known key (a typo would otherwise be silently ignored).
- A kind declares its own `[<kind>]` section with `IngestHooks.config_section` (CFMM's `[cfmm] types`).

The checked file is kept as read (`Workspace.config` is the plain dict the stages read): the schema only says what
is allowed. docs/config.md documents every key; tests/test_docs.py checks it names each one.
"""

from __future__ import annotations

import difflib
import json
import types
import typing
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cftools.errors import WorkspaceError

# A key the code reads must be declared here (else it is reported as unknown); its type is TOML's: strings,
# integers, floats (an integer is taken too), booleans, arrays and tables.
STRICT = ConfigDict(strict=True, extra="allow")


class Section(BaseModel):
    model_config = STRICT


class StoreSettings(Section):
    url: Optional[str] = None
    password_env: Optional[str] = None


class Price(Section):
    input_per_mtok: Optional[float] = Field(None, ge=0)
    output_per_mtok: Optional[float] = Field(None, ge=0)
    batch_discount: Optional[float] = Field(None, ge=0, lt=1)


class LlmSettings(Section):
    backend: Optional[str] = None
    model: Optional[str] = None
    model_path: Optional[str] = None
    loader: Optional[str] = None
    threads: Optional[int] = Field(None, ge=1)
    base_url: Optional[str] = None
    api_key_env: Optional[str] = None
    structured_output: Optional[str] = None
    timeout: Optional[float] = Field(None, gt=0)
    request_attempts: Optional[int] = Field(None, ge=1)
    backoff_initial: Optional[float] = Field(None, ge=0)
    backoff_max: Optional[float] = Field(None, ge=0)
    max_connections: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0)
    max_tokens: Optional[int] = Field(None, ge=1)
    top_p: Optional[float] = Field(None, ge=0, le=1)
    rederive: Optional[bool] = None
    max_cost: Optional[float] = Field(None, ge=0)
    max_reply_bytes: Optional[int] = Field(None, ge=1)
    tokenizer: Optional[str] = None
    batch_window: Optional[str] = None
    batch_poll_s: Optional[float] = Field(None, gt=0)
    prices: Optional[dict[str, Price]] = None


class ImageSettings(Section):
    backend: Optional[str] = None
    model: Optional[str] = None
    base_url: Optional[str] = None
    api_key_env: Optional[str] = None
    size: Optional[str] = None
    steps: Optional[int] = Field(None, ge=1)
    guidance: Optional[float] = None
    cache_dir: Optional[str] = None
    allow_downloads: Optional[bool] = None
    device: Optional[str] = None
    dtype: Optional[str] = None
    consistency: Optional[str] = None
    strength: Optional[float] = Field(None, ge=0, le=1)
    attention_slicing: Optional[bool] = None
    cpu_offload: Optional[bool] = None
    timeout: Optional[float] = Field(None, gt=0)
    request_attempts: Optional[int] = Field(None, ge=1)
    backoff_initial: Optional[float] = Field(None, ge=0)
    backoff_max: Optional[float] = Field(None, ge=0)
    response_format: Optional[str] = None
    quality: Optional[str] = None
    max_pixels: Optional[int] = Field(None, ge=1)
    max_reply_bytes: Optional[int] = Field(None, ge=1)
    styles_dir: Optional[str] = None
    score_model: Optional[str] = None


class EditSettingsSection(Section):
    """`[edits]`: the edit model of `cftools generate edits` (cftools.imagegen.edits)."""
    backend: Optional[str] = None
    model: Optional[str] = None
    licence: Optional[str] = None
    license: Optional[str] = None
    allow_non_commercial: Optional[bool] = None
    allow_downloads: Optional[bool] = None
    base_url: Optional[str] = None
    api_key_env: Optional[str] = None
    size: Optional[str] = None
    steps: Optional[int] = Field(None, ge=1)
    guidance: Optional[float] = None
    image_guidance: Optional[float] = None
    cache_dir: Optional[str] = None
    device: Optional[str] = None
    dtype: Optional[str] = None
    timeout: Optional[float] = Field(None, gt=0)
    request_attempts: Optional[int] = Field(None, ge=1)
    backoff_initial: Optional[float] = Field(None, ge=0)
    backoff_max: Optional[float] = Field(None, ge=0)
    response_format: Optional[str] = None
    max_pixels: Optional[int] = Field(None, ge=1)


class Person(Section):
    """`[label_studio.people."EMAIL"]`: one annotator's own server, token variable and (for `annotate serve`)
    password variable."""
    url: Optional[str] = None
    token_env: Optional[str] = None
    password_env: Optional[str] = None


class LabelStudioSettings(Section):
    url: Optional[str] = None
    token_env: Optional[str] = None
    document_root: Optional[str] = None
    image_url_prefix: Optional[str] = None
    image_data_uri: Optional[bool] = None
    project_prefix: Optional[str] = None
    batch_size: Optional[int] = Field(None, ge=1)
    timeout: Optional[float] = Field(None, gt=0)
    retries: Optional[int] = Field(None, ge=0)
    pull_workers: Optional[int] = Field(None, ge=1)
    export_chunk: Optional[int] = Field(None, ge=1)
    annotators: Optional[list[str]] = None
    people: Optional[dict[str, Person]] = None


class AnnotateSettings(Section):
    """`[annotate]`: control items and what is done about a person's accuracy on them."""
    control_rate: Optional[float] = Field(None, ge=0, lt=1)
    min_accuracy: Optional[float] = Field(None, ge=0, le=1)
    min_controls: Optional[int] = Field(None, ge=1)


class SourceSettings(Section):
    licence: Optional[str] = None
    license: Optional[str] = None
    licences: Optional[dict[str, str]] = None
    licenses: Optional[dict[str, str]] = None


class ReleaseSettings(Section):
    license: Optional[str] = None
    licence: Optional[str] = None
    creators: Optional[Union[list[Union[str, dict[str, str]]], str]] = None
    description: Optional[str] = None
    url: Optional[str] = None
    cite_as: Optional[str] = None
    keywords: Optional[Union[list[str], str]] = None
    data_use_cases: Optional[str] = None
    data_biases: Optional[str] = None
    data_limitations: Optional[str] = None
    personal_sensitive_information: Optional[str] = None
    data_social_impact: Optional[str] = None
    annotator_demographics: Optional[str] = None
    data_release_maintenance_plan: Optional[str] = None
    data_collection: Optional[str] = None


class RaySettings(Section):
    address: Optional[str] = None  # what --ray without a value connects to (else this machine's cluster)
    actors: Optional[int] = Field(None, ge=1)  # a fixed number of workers (else one per GPU, or per node)
    cpus_per_actor: Optional[float] = Field(None, gt=0)  # CPUs a model worker asks Ray for


class CheckSettings(Section):
    blind_answerable_model: Optional[str] = None
    low_precision: Optional[float] = Field(None, ge=0, le=1)  # a check measured below it is named (calibration)


# The sections of every workspace; each kind may add `[<kind name>]` (IngestHooks.config_section).
SECTIONS: dict[str, type[Section]] = {
    "store": StoreSettings, "llm": LlmSettings, "images": ImageSettings, "edits": EditSettingsSection, "label_studio": LabelStudioSettings,
    "annotate": AnnotateSettings,
    "sources": SourceSettings, "release": ReleaseSettings, "checks": CheckSettings, "ray": RaySettings,
}


def known_sections() -> dict[str, type[BaseModel]]:
    """The fixed sections and those the registered kinds declare."""
    from cftools.kinds.registry import all_kinds

    sections: dict[str, type[BaseModel]] = dict(SECTIONS)
    for name, kind in all_kinds().items():
        if kind.hooks.ingest.config_section is not None:
            sections.setdefault(name, kind.hooks.ingest.config_section)
    return sections


# Keys spelled two ways (British and American): either is read, the stages read the first of each pair.
ALIASES: dict[str, tuple[tuple[str, str], ...]] = {
    "sources": (("licence", "license"), ("licences", "licenses")),
    "edits": (("licence", "license"),),
    "release": (("license", "licence"),),
}


def with_aliases(config: dict[str, Any], where: str = "cftools.toml") -> dict[str, Any]:
    """CONFIG with each key of ALIASES set from its other spelling where only that one is given; both given with
    different values is one error line."""
    for name, pairs in ALIASES.items():
        section = config.get(name)
        if not isinstance(section, dict):
            continue
        for read, other in pairs:
            if other not in section:
                continue
            if read in section and section[read] != section[other]:
                raise WorkspaceError(f"{where}: [{name}] {read} and {other} are one setting spelled two ways, "
                                     f"and they differ ({shown(section[read])}, {shown(section[other])}); keep one")
            section.setdefault(read, section[other])
    return config


def check_config(config: dict[str, Any], where: str = "cftools.toml") -> list[str]:
    """Check CONFIG (cftools.toml as parsed) against the schema: a WorkspaceError (one line) for a value of the
    wrong type; the warnings (unknown keys, each with the closest known one) otherwise."""
    sections = known_sections()
    warnings: list[str] = []
    for name, value in config.items():
        model = sections.get(name)
        if model is None:
            table = isinstance(value, dict)
            warnings.append(f"{where}: unknown {'section' if table else 'key'} {header([name]) if table else name}"
                            + closest(name, sections, as_header=table))
            continue
        if not isinstance(value, dict):
            raise WorkspaceError(f"{where}: {name} = {shown(value)}: expected a table ([{name}])")
        try:
            parsed = model.model_validate(value)
        except ValidationError as exc:
            raise WorkspaceError(type_error_line(exc, model, name, value, where)) from None
        warnings += unknown_keys(parsed, [name], where)
    return warnings


def unknown_keys(parsed: BaseModel, path: list[str], where: str) -> list[str]:
    """Keys of PARSED (and the tables inside it) that its model does not declare."""
    found = [f"{where}: unknown key {header(path)} {key}{closest(key, type(parsed).model_fields)}"
             for key in (parsed.model_extra or {})]
    for name in type(parsed).model_fields:
        value = getattr(parsed, name)
        if isinstance(value, BaseModel):
            found += unknown_keys(value, path + [name], where)
        elif isinstance(value, dict):
            for key, entry in value.items():
                if isinstance(entry, BaseModel):
                    found += unknown_keys(entry, path + [name, key], where)
    return found


def closest(key: str, known: typing.Iterable[str], as_header: bool = False) -> str:
    """' (did you mean KNOWN?)' with the known key nearest KEY (difflib), or a note that cftools does not read it."""
    match = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    if not match:
        return " (not read by cftools)"
    return f" (did you mean {header([match[0]]) if as_header else match[0]}?)"


def header(path: list[str]) -> str:
    """["llm", "prices", "gpt-4o"] -> [llm.prices."gpt-4o"] (a part that is not a bare TOML key is quoted)."""
    return "[" + ".".join(p if p.replace("_", "").replace("-", "").isalnum() and p.isascii() else json.dumps(p)
                          for p in path) + "]"


def shown(value: Any, limit: int = 60) -> str:
    """VALUE as TOML-like text on one line (json escapes control characters), cut at LIMIT characters."""
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def type_error_line(exc: ValidationError, model: type[BaseModel], section: str, value: dict[str, Any],
                    where: str) -> str:
    """The first wrong value of EXC as one line: `[section] key = value: expected ...`."""
    error = exc.errors()[0]
    keys, data, annotation = [section], value, None
    current: Any = model
    for part in error["loc"]:
        if isinstance(data, dict) and part in data:
            annotation = field_type(current, part)
            current = annotation
            keys.append(str(part))
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            keys[-1] += f"[{part}]"
            data = data[part]
            annotation = current = element_type(current)
        else:
            break
    more = len({e["loc"][:len(keys) - 1] for e in exc.errors()}) - 1
    expected = describe(annotation) if annotation is not None and typing.get_origin(annotation) in UNIONS \
        and error["type"].endswith("_type") else expectation(error, annotation)
    key = f"{header(keys[:-1])} {keys[-1]}" if len(keys) > 1 else header(keys)
    return f"{where}: {key} = {shown(data)}: expected {expected}" + (f" (and {more} more)" if more > 0 else "")


UNIONS = (Union, types.UnionType)
TYPE_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def field_type(container: Any, key: Any) -> Any:
    """The declared type of KEY inside CONTAINER (a model or a dict[str, X] type), optional layers removed."""
    container = without_none(container)
    if isinstance(container, type) and issubclass(container, BaseModel):
        field = container.model_fields.get(key)
        return without_none(field.annotation) if field is not None else None
    if typing.get_origin(container) is dict:
        return without_none(typing.get_args(container)[1])
    return None


def element_type(container: Any) -> Any:
    container = without_none(container)
    for option in typing.get_args(container) if typing.get_origin(container) in UNIONS else (container,):
        if typing.get_origin(option) is list:
            return without_none(typing.get_args(option)[0])
    return None


def without_none(annotation: Any) -> Any:
    if typing.get_origin(annotation) in UNIONS:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else Union[tuple(args)]
    return annotation


def describe(annotation: Any) -> str:
    """What a person writes for ANNOTATION: 'a string', 'a list of strings', 'a table', ..."""
    annotation = without_none(annotation)
    origin = typing.get_origin(annotation)
    if origin in UNIONS:
        return " or ".join(describe(a) for a in typing.get_args(annotation))
    if origin is list:
        inner = without_none(typing.get_args(annotation)[0])
        options = typing.get_args(inner) if typing.get_origin(inner) in UNIONS else (inner,)
        return "a list of " + " or ".join(plural(describe(o)) for o in options) + ("," if len(options) > 1 else "")
    if origin is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return "a table"
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(a) for a in typing.get_args(annotation))
    return TYPE_WORDS.get(annotation, str(annotation))


def plural(text: str) -> str:
    """'a string' -> 'strings', 'an integer' -> 'integers'."""
    word = text.partition(" ")[2] if text.startswith(("a ", "an ")) else text
    return word + "s" if " " not in word else word


def expectation(error: dict[str, Any], annotation: Any) -> str:
    """Pydantic's error in a person's words: the type wanted, or the bound the value crosses."""
    bounds = {"greater_than_equal": ">= {ge}", "greater_than": "> {gt}", "less_than_equal": "<= {le}",
              "less_than": "< {lt}"}
    if error["type"] in bounds:
        return "a number " + bounds[error["type"]].format(**{k: f"{v:g}" for k, v in error.get("ctx", {}).items()})
    if annotation is not None and error["type"].endswith("_type"):
        return describe(annotation)
    return str(error["msg"]).removeprefix("Input should be ").lower()
