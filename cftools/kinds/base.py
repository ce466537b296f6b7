"""What a benchmark shape (a *kind*) declares, so that the stages can ask it instead of naming it.

A kind is one module with one `Kind` subclass, registered under the `cftools.kinds` entry point group
(see `cftools.kinds.registry`). It gives each stage it supports one hooks object (`IngestHooks`,
`GenerateHooks`, ...: a subclass that sets what the kind has); a stage asks `kind.hooks.<stage>`, which holds
the stage's defaults where the kind gives it nothing (then `kind.<stage>` is None):

| stage     | asks the kind for (`kind.hooks.<stage>.…`)                                       |
|-----------|----------------------------------------------------------------------------------|
| ingest    | `data_model` and `validate` (the typed `item.data`), `groups`, `config_section`, |
|           | `commands()` for its own ingests and generators                                  |
| generate  | `generators` (names and descriptions), `edit_subject` (items that can be edited) |
| check     | `checks` (one `Check` per code), `answer_style` and `answer_type` of an item     |
| annotate  | `tasks` (label config per task), `task_data` (what the annotator sees),          |
|           | `authoring_tasks` (tasks on images whose submissions become draft items),        |
|           | `author_task_data`, `authored_item`, `decide` (two judgments -> a decision),     |
|           | `status_table` (`cftools status --kind K`)                                       |
| release   | `export_formats` (peer formats beside the native release), `export_record`,      |
|           | `record_problem`, `card_tables` (data card sections), `diff_fields` (`release    |
|           | diff`: question, answer, options), `command_options`                             |
| evaluate  | `eval_questions`, `summarize`, `report_table`, `csv_rows`, `plot_series`,        |
|           | `prompt_variants` (`eval --prompt`), `read_as_paper` (`eval --reading paper`)    |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from cftools.errors import CftoolsError

if TYPE_CHECKING:  # only for annotations
    import click

    from cftools.findings import Result
    from cftools.item_view import ItemView


class ItemDataError(CftoolsError):
    """An item's `data` does not fit its kind's model: names the item and the field."""

    def __init__(self, kind: str, item: object, field_path: str, reason: str) -> None:
        self.kind, self.item, self.field_path, self.reason = kind, item, field_path, reason
        super().__init__(f"item {item} ({kind}): field {field_path!r}: {reason}")


class ItemData(BaseModel):
    """Base of a kind's typed `item.data`: unknown keys are kept (annotator notes, provenance)."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class Check:
    """One automatic check: `run` returns a Flag, a Note (could not decide) or None."""

    code: str
    run: Callable[["ItemView"], "Result"]
    applies: Callable[["ItemView"], bool]
    scope: str  # for people: which items it applies to


@dataclass(frozen=True)
class Generator:
    """A generator of a kind: its CLI name, what it reads and what it writes (distilabel-style)."""

    name: str
    description: str
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    templates: tuple[str, ...] = ()  # prompt templates it renders, relative to prompts/


@dataclass(frozen=True)
class ExportFormat:
    """A peer release format: `write(release)` (a `cftools.release.release.Release`: its folder, items, name,
    splits, options, ...); `keeps(record)` says which records it holds."""

    name: str
    description: str
    write: Callable[..., None]
    keeps: Callable[[dict], bool] = lambda record: True


@dataclass(frozen=True)
class TaskSpec:
    """A Label Studio task of a kind beside verify/adjudicate (MuCR's select and explain): who decides it and
    which items it takes. The kind decides its tasks itself (`AnnotateHooks.decide_task`)."""

    name: str
    template: str  # label config template, under annotation/
    annotators: int = 2  # distinct people whose judgments decide a task
    tiebreak: int = 0  # people asked beyond those when they disagree (the task's overlap is raised on the server)
    statuses: tuple[str, ...] = ("checked",)  # item statuses a push takes
    to_status: Optional[str] = None  # the item's status once pushed (None: unchanged)
    description: str = ""


@dataclass
class TaskOutcome:
    """What the judgments of one task decide (`AnnotateHooks.decide_task`)."""

    status: Optional[str] = None  # the item's new status (None: unchanged)
    data: dict[str, Any] = field(default_factory=dict)  # keys merged into the item's data
    decided: bool = False
    wants: int = 0  # more than the task's `annotators` are needed now (a tiebreak): ask this many in all
    rule: str = ""
    new_items: list[dict[str, Any]] = field(default_factory=list)  # items the decision makes (rows for `items`)


@dataclass(frozen=True)
class EditSubject:
    """What `generate edits` needs of an item whose image can be edited into its counterfactual world: the
    original question and answer, the counterfactual question (its presupposition is the edit) and answer."""

    original_question: str
    original_answer: str
    counterfactual_question: str
    counterfactual_answer: str
    answer_type: Optional[str] = None  # number | yes/no | other (None: read from the answers)


@dataclass
class ReportTable:
    section: str
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    note: str = ""  # a paragraph under the table's title in report.md (what its scores mean)


# -- the stages' hooks ---------------------------------------------------------------------------------------------
# A kind gives each stage one object: a subclass of that stage's hooks class below, which sets the attributes and
# overrides the methods it supports; what it leaves keeps the defaults here. Every hook lives in one stage.


class Hooks:
    """What a kind gives one stage. `self.kind` is the kind it belongs to: its name, its template root and the
    hooks of its other stages (`self.kind.hooks.<stage>`)."""

    def __init__(self, kind: "Kind") -> None:
        self.kind = kind

    def fills(self, hook: str) -> bool:
        """Whether the kind gives HOOK its own value or method (not this stage's default)."""
        base = next(cls for cls in type(self).__mro__ if cls in STAGE_CLASSES.values())
        own, default = getattr(self, hook), getattr(base, hook)
        if callable(default) and not isinstance(default, type):
            return getattr(own, "__func__", own) is not default
        return bool(own) and own != default


class IngestHooks(Hooks):
    """What an item of the kind is (`validate` types `item.data`) and the kind's own ingest commands and config."""

    data_model: type[ItemData] = ItemData
    groups: tuple[str, ...] = ()  # the groups (types) its items fall into, when fixed
    # The kind's own `[<name>]` section of cftools.toml (a pydantic model; cftools.config checks it), if any.
    config_section: Optional[type[BaseModel]] = None

    def validate(self, data: Optional[dict], item: object = "?") -> ItemData:
        """The typed model of DATA; a bad field raises ItemDataError naming ITEM and the field."""
        try:
            return self.data_model.model_validate(data or {})
        except ValidationError as exc:
            error = exc.errors()[0]
            path = ".".join(str(p) for p in error["loc"]) or "data"
            raise ItemDataError(self.kind.name, item, path, error["msg"]) from None

    def commands(self) -> dict[str, list["click.Command"]]:
        """Extra CLI commands by parent group ("ingest", "generate"), like an `llm` plugin's register_commands."""
        return {}


class GenerateHooks(Hooks):
    """The kind's generators (their commands come from `IngestHooks.commands`) and what `generate edits` needs."""

    generators: tuple[Generator, ...] = ()

    def edit_subject(self, item: Any, source: Any) -> Optional[EditSubject]:
        """The item's edit subject when the kind's items have an image and a counterfactual condition (C-VQA,
        CFMM); None (the default) when its items cannot be edited. SOURCE is the item's source question."""
        return None


class CheckHooks(Hooks):
    """The kind's automatic checks and what they need to know of its items."""

    checks: tuple[Check, ...] = ()

    def answer_style(self, item: "ItemView") -> Optional[str]:
        """How the item's answer is written, for the checks: "count", "yes/no", "choice" or None."""
        return None

    def answer_type(self, group: str, answer: Optional[str]) -> Optional[str]:
        """"number", "yes/no" or "other" for an item of GROUP (None: infer it from the answer)."""
        return None

    def prepare_checks(self, config: dict[str, Any]) -> None:
        """Called before a check run with the workspace's configuration (e.g. an image model's tokenizer)."""

    def use_store(self, store: Any) -> None:
        """Called before a check run with the store, for checks that read stored files (a pair's images)."""


class AnnotateHooks(Hooks):
    """The kind's Label Studio tasks: their configs, what an annotator sees, how a judgment is read and decided."""

    tasks: dict[str, str] = {}  # Label Studio task -> label config template (under annotation/)
    # Tasks whose subject is an image, not an item: each submission becomes a new draft item (`authored_item`).
    authoring_tasks: tuple[str, ...] = ()

    def task_template(self, task: str) -> str:
        try:
            return self.tasks[task]
        except KeyError:
            raise CftoolsError(f"kind {self.kind.name!r} has no {task!r} task; it has: {', '.join(self.tasks)}") \
                from None

    def label_config(self, task: str, workspace_root: Optional[str] = None) -> str:
        """The Label Studio config of TASK rendered from its template (annotation/<kind>/<task>.xml.j2; a
        workspace's copy wins)."""
        from jinja2 import Undefined

        from cftools.judgments import CONTROLS, DECISION_CHOICES, FLAG_CHOICES, NO, YES
        from cftools.resources import template_env

        env = template_env("annotation", Path(workspace_root) if workspace_root else None, self.kind.template_root,
                           keep_trailing_newline=True, autoescape=True, undefined=Undefined)
        return env.get_template(self.task_template(task)).render(
            yes_no=(YES, NO), flag_choices=FLAG_CHOICES, decision_choices=DECISION_CHOICES,
            groups=self.kind.hooks.ingest.groups, **CONTROLS)

    def instructions(self, task: str, workspace_root: Optional[str] = None, separate_servers: bool = False,
                     shared_project: bool = False) -> str:
        """What an annotator reads before the first task of TASK (HTML, the project's instructions): the
        template beside the task's label config (`<task>.instructions.html.j2`), "" where there is none.
        SEPARATE_SERVERS: the last separation check proved the project's server the annotator's alone
        (`cftools.annotate.separation`; the text says so only then). SHARED_PROJECT: one project for everyone (no
        assignment), where an unusable submission is offered to one more person rather than returned to its author."""
        from jinja2 import TemplateNotFound

        from cftools.resources import template_env

        env = template_env("annotation", Path(workspace_root) if workspace_root else None, self.kind.template_root,
                           autoescape=False)
        name = self.task_template(task).removesuffix(".xml.j2") + ".instructions.html.j2"
        try:
            return env.get_template(name).render(separate_servers=separate_servers, shared_project=shared_project).strip()
        except TemplateNotFound:
            return ""

    def check_judgment(self, task: str, answer: Any, task_data: dict[str, Any]) -> None:
        """What only cftools can check of one judgment against the task it was made for (the choices that exist,
        an answer among the item's options): raise `cftools.judgments.InvalidResult` with the reason."""
        return None

    def read_result(self, task: str, result: Any, workspace_root: Optional[str] = None) -> dict[str, Any]:
        """Control name -> answer of one submitted result of TASK, checked against the config it was made with
        (`cftools.judgments.InvalidResult` if it does not fit)."""
        from cftools.judgments import read_result

        return read_result(task_controls(self.kind, task, workspace_root), result)

    def task_data(self, item: Any, source: Any, image_value: str, extra_images: dict[str, str]) -> dict[str, Any]:
        """What the annotator sees of ITEM (beside item_key, kind, group, check_flags). IMAGE_VALUE is the item's
        image as Label Studio loads it; EXTRA_IMAGES maps `sha256:…` references in its data the same way."""
        return {"image": image_value, "question": item.question, "proposed_answer": item.answer or ""}

    def task_spec(self, task: str) -> Optional[TaskSpec]:
        """The spec of a task beside verify/adjudicate; None for those two (the stage's own rules decide them)."""
        return None

    def task_units(self, task: str, item: Any) -> list[str]:
        """The tasks one item makes of TASK, by unit (MuCR select: one per style still to choose); [""] = one."""
        return [""]

    def task_payload(self, task: str, unit: str, item: Any, source: Any, image_value: str,
                     extra_images: dict[str, str]) -> dict[str, Any]:
        """What the annotator sees in a task of TASK (default: `task_data`)."""
        return self.task_data(item, source, image_value, extra_images)

    def decide_task(self, task: str, unit: str, item: Any, answers: Sequence[tuple[str, Any]]) -> TaskOutcome:
        """The outcome of a task of a `task_spec` task from its (annotator, judgment) pairs, in annotation order."""
        return TaskOutcome()

    def adjudicated(self, answer: Any, item_data: Optional[dict] = None, adjudicator: Optional[str] = None) -> Any:
        """The decision of one adjudication judgment by ADJUDICATOR on an item with ITEM_DATA (default:
        `cftools.judgments.adjudicated`)."""
        from cftools.judgments import adjudicated

        return adjudicated(answer)

    def agreement_labels(self, task: str, answer: Any) -> dict[str, str]:
        """Question -> label of one judgment of TASK, for inter-annotator agreement (beside verify's)."""
        return {}

    def read_judgment(self, purpose: str, result: Any, workspace_root: Optional[str] = None) -> Any:
        """One submitted Label Studio result of a task of this kind, read back into a judgment (an `Answer`)."""
        from cftools.judgments import parse_answer

        return parse_answer(purpose, self.read_result(purpose, result, workspace_root))

    def decide(self, first: Any, second: Any) -> Any:
        """The item's fate from two verification judgments (an `Answer` each): the shared rules by default."""
        from cftools.judgments import decide

        return decide(first, second)

    def author_task_data(self, image_value: str, sources: Sequence[Any]) -> dict[str, Any]:
        """What the annotator sees in an authoring task: the image and what is known about it (SOURCES: its
        source questions)."""
        return {"image": image_value}

    def authored_item(self, task: str, result: Any, workspace_root: Optional[str] = None) -> Optional[dict[str, Any]]:
        """One submitted authoring result read back: the new item's fields (group, question, answer, data), None
        when the annotator said the image suits nothing; `InvalidResult` when it does not fit the config."""
        return None

    def status_table(self, store: Any, workspace: Any = None) -> Optional[ReportTable]:
        """The kind's own figures for `cftools status --kind` (None: nothing beyond the shared counts)."""
        return None


class ReleaseHooks(Hooks):
    """The kind's part of a release: its records, the rules they must hold, peer formats, the data card."""

    export_formats: tuple[ExportFormat, ...] = ()

    def record_problem(self, record: dict[str, Any]) -> Optional[str]:
        """Why a release record breaks this kind's decision rules (an answer outside its options, too few
        independent explanations…), None when it holds: `export` refuses such a record and `verify` reports it."""
        return None

    def export_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """A native release record of this kind, finished by the kind (the shared fields are already filled)."""
        return record

    def diff_fields(self, record: dict[str, Any]) -> dict[str, Any]:
        """What `cftools release diff` compares of one release record, by what a change means: `question` (the text
        the model is asked: a change makes a stored prediction stale), `answer` (the gold the kind scores against)
        and `options` (the exact option texts offered): a change of either relabels the item, and stored predictions
        are rescored against the new gold. Images are compared apart from these, by SHA-256."""
        return {"question": [record.get("original_question"), record.get("question")],
                "answer": [record.get("original_answer"), record.get("answer")],
                "options": record.get("options")}

    def card_tables(self, records: Sequence[dict[str, Any]]) -> list[ReportTable]:
        """Extra data card tables for the records of this kind in a release."""
        return []

    def card_section(self, records: Sequence[dict], provenance: Sequence[dict], context: dict[str, Any]) -> list[str]:
        """Markdown lines of the kind's own data-card section (empty: none)."""
        return []

    def command_options(self, command: str) -> list["click.Option"]:
        """Options this kind adds to a stage's command ("export", "eval"); their values reach the kind as
        `options` (export formats' `write`, `EvalContext.options`). Names start with the kind's name."""
        return []


class EvaluateHooks(Hooks):
    """The kind's questions to a model, how its replies are read and judged, and its scores and report."""

    metrics: tuple[str, ...] = ()
    eval_templates: tuple[str, ...] = ()  # eval prompts (under prompts/eval/) that enter a run's hash
    prompt_variants: tuple[str, ...] = ()  # `eval --prompt` values besides "plain" (see EvalContext)
    # The eval settings of the paper's main table (`mode`, or a kind option such as `mucr_input`) -> value; a run
    # left to its defaults uses them, and the report says whether it did (`setting_used`).
    paper_settings: dict[str, str] = {}

    def prepare_eval_items(self, items: Sequence[Any], options: dict[str, Any]) -> None:
        """Finish the records of ITEMS (export items of this kind) so that `eval_questions` can ask them in a
        format other than the kind's own (lmms-eval, VLMEvalKit): e.g. MuCR's choice sets. Default: nothing."""

    def eval_questions(self, record: dict, ctx: "EvalContext") -> list:
        """The questions a model is asked about RECORD (a release record)."""
        return []

    def read_as_paper(self, question: Any, raw: Optional[str]) -> Optional[tuple[Optional[str], bool]]:
        """(parsed, correct) of a generated reply read as the paper's own scripts read it (`eval --reading
        paper`); None where the kind has no such reading for QUESTION (cftools' reading is used)."""
        return None

    def judge_prompts(self, question: Any, answer: str, templates: Any) -> list[str]:
        """The judge's prompts for a judged free-text ANSWER to QUESTION (one per reference, say)."""
        return []

    def judge_schema(self) -> Any:
        """The judge's output schema (a `cftools.llm.structured.OutputSchema`; None: free text)."""
        return None

    def judge_reply(self, reply: Any) -> str:
        """A validated judge reply (the schema's model) as the text `judge_result` reads."""
        return str(reply)

    def judge_result(self, question: Any, replies: Sequence[str], aggregate: str) -> dict[str, Any]:
        """What a prediction line keeps of the judge's REPLIES (`similarities` None: not judged)."""
        return {"similarities": None}

    def summarize(self, outcomes: Sequence[dict]) -> dict[str, Any]:
        return {}

    def report_table(self, section: dict[str, Any], fmt: "ScoreFormat") -> Optional[ReportTable]:
        return None

    def csv_rows(self, section: dict[str, Any]) -> list[tuple[str, str, Any, Optional[int]]]:
        """(group, metric, score or value, n) rows of the flat CSV report."""
        return []

    def paper_tables(self, section: dict[str, Any], fmt: "ScoreFormat") -> list[ReportTable]:
        """The scores again in the layout of the paper's table, where it differs from `report_table`."""
        return []

    def setting_used(self, setting: str, config: dict[str, Any], section: dict[str, Any]) -> Optional[str]:
        """What a run used for one of `paper_settings`: the run's `mode`, else its kind option."""
        if setting in config:
            return None if config[setting] is None else str(config[setting])
        value = (config.get("kind_options") or {}).get(setting)
        return None if value is None else str(value)

    def plot_series(self, section: dict[str, Any]) -> Optional[tuple[str, list[str], list[tuple[str, list]]]]:
        return None


# Each stage's hooks class, in the order of the flow; `cftools kinds` shows the stages a kind fills.
STAGE_CLASSES: dict[str, type[Hooks]] = {"ingest": IngestHooks, "generate": GenerateHooks, "check": CheckHooks,
                                         "annotate": AnnotateHooks, "release": ReleaseHooks,
                                         "evaluate": EvaluateHooks}


def hook_names(stage_class: type[Hooks]) -> tuple[str, ...]:
    """The hooks of one stage: the public names its class adds to `Hooks`."""
    return tuple(name for name in vars(stage_class) if not name.startswith("_"))


STAGE_HOOKS: dict[str, tuple[str, ...]] = {stage: hook_names(cls) for stage, cls in STAGE_CLASSES.items()}
HOOK_STAGE: dict[str, str] = {hook: stage for stage, hooks in STAGE_HOOKS.items() for hook in hooks}


@dataclass(frozen=True)
class StageHooks:
    """What the stages ask a kind through (`kind.hooks.<stage>`): the kind's own hooks of each stage, or that
    stage's defaults where the kind gives it nothing — never None."""

    ingest: IngestHooks
    generate: GenerateHooks
    check: CheckHooks
    annotate: AnnotateHooks
    release: ReleaseHooks
    evaluate: EvaluateHooks


class Kind:
    """A benchmark shape: its name, its title and what it gives each stage.

    A subclass sets `name` and `title` and, per stage it supports, a hooks class (a subclass of `IngestHooks`,
    `GenerateHooks`, …); a stage left None gets nothing from the kind (`kind.generate is None`) and the stages
    use that stage's defaults (`kind.hooks.generate`)."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    # A kind shipped in its own package keeps its templates there: TEMPLATE_ROOT/annotation/..., .../prompts/...
    template_root: ClassVar[Optional[Path]] = None
    # Declared as classes on the kind's class; the kind's instance holds their instances (or None).
    ingest: Optional[IngestHooks] = None
    generate: Optional[GenerateHooks] = None
    check: Optional[CheckHooks] = None
    annotate: Optional[AnnotateHooks] = None
    release: Optional[ReleaseHooks] = None
    evaluate: Optional[EvaluateHooks] = None

    def __init__(self) -> None:
        given = {stage: self.given_hooks(stage, cls) for stage, cls in STAGE_CLASSES.items()}
        for stage, hooks in given.items():
            setattr(self, stage, hooks)
        self.hooks = StageHooks(**{stage: hooks if hooks is not None else STAGE_CLASSES[stage](self)
                                   for stage, hooks in given.items()})

    def given_hooks(self, stage: str, stage_class: type[Hooks]) -> Optional[Hooks]:
        """The hooks object the kind declares for STAGE (None: none), with any hook of that stage written the old
        way, as the kind's own attribute or method (`with_legacy_hooks`)."""
        declared = getattr(type(self), stage)
        if declared is not None and not (isinstance(declared, type) and issubclass(declared, stage_class)):
            raise CftoolsError(f"kind {self.name!r}: {stage} = {declared!r} is not a subclass of "
                               f"{stage_class.__name__}")
        hooks = (declared or stage_class)(self)
        return hooks if with_legacy_hooks(self, hooks, stage_class) or declared is not None else None

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the kind does not have: a hook asked of the kind itself, the way before stages.
        stage = HOOK_STAGE.get(name)
        hooks = self.__dict__.get("hooks")
        if stage is None or hooks is None:
            raise AttributeError(name)
        if self.__dict__.get("_legacy_hooks"):  # its own methods still call `self.<hook>`
            return getattr(getattr(hooks, stage), name)
        raise AttributeError(f"kind {self.name!r} has no {name!r}: a kind's hooks are grouped by stage, "
                             f"ask kind.hooks.{stage}.{name}")

    def stages(self) -> list[str]:
        """The stages this kind gives hooks to (`cftools kinds`)."""
        return [stage for stage in STAGE_CLASSES if getattr(self, stage) is not None]

    def describe(self) -> dict[str, Any]:
        """What `cftools kinds --json` prints."""
        ingest, generate, check, annotate, release, evaluate = (getattr(self.hooks, s) for s in STAGE_CLASSES)
        return {
            "name": self.name, "title": self.title, "groups": list(ingest.groups), "stages": self.stages(),
            "fields": list(ingest.data_model.model_fields),
            "generators": [{"name": g.name, "description": g.description, "inputs": list(g.inputs),
                            "outputs": list(g.outputs), "templates": list(g.templates)} for g in generate.generators],
            "checks": [{"code": c.code, "scope": c.scope} for c in check.checks],
            "tasks": dict(annotate.tasks),
            "export_formats": [{"name": f.name, "description": f.description} for f in release.export_formats],
            "metrics": list(evaluate.metrics),
        }


def with_legacy_hooks(kind: Kind, hooks: Hooks, stage_class: type[Hooks]) -> bool:
    """Put into HOOKS (one stage's) the hooks KIND has the old way, as its own attributes and methods (a kind
    written before the stages had objects, or a subclass of a built-in kind overriding one); whether it gave any of
    its own. Those methods keep running on the kind, and their `self.<hook>` reaches the stage (`Kind.__getattr__`)."""
    own = [name for name in hook_names(stage_class) if name in dir(type(kind))]
    for name in own:
        setattr(hooks, name, getattr(kind, name))
    if own:
        kind.__dict__["_legacy_hooks"] = True
    return any(hooks.fills(name) for name in own)


@dataclass
class ScoreFormat:
    """How a report prints scores: `pct` for accuracies, `rate` for unknown rates, `points` for 0-10 scores."""

    pct: Callable[[Optional[dict]], str]
    rate: Callable[[Optional[float]], str]
    points: Callable[[Optional[dict]], str]


@dataclass
class EvalContext:
    """What a kind needs to build its eval questions."""

    release_dir: Any
    templates: Any  # cftools.evaluate.PromptTemplates
    mode: str
    needs_image: bool
    max_new_tokens: int = 16
    explain_tokens: int = 128
    skipped: Any = None  # cftools.evaluate.Skipped
    prompt_variant: str = "plain"  # a kind's `prompt_variants` (e.g. CFMM's icl1, cot1); "plain" asks as is
    swap_options: bool = False  # also ask every question with options in reverse order (position bias)
    options: dict[str, Any] = field(default_factory=dict)  # the kinds' eval options (`ReleaseHooks.command_options`)


@lru_cache(maxsize=None)
def task_controls(kind: Kind, task: str, workspace_root: Optional[str] = None) -> dict[str, Any]:
    """The answerable controls of KIND's TASK config (rendered once per process: a pull reads thousands)."""
    from cftools.judgments import controls_of

    return controls_of(kind.hooks.annotate.label_config(task, workspace_root))
