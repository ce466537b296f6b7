"""Who answers the eval questions: model specs (`parse_model_spec`) and their answerers, and the judge.

- `hf:PATH_OR_ID` — a transformers image-text-to-text model (`cftools.evaluate.vlm.HFVisionModel`); generate or
  rank.
- `openai:MODEL` — an OpenAI-compatible vision chat API, images as data URLs (the `cftools.llm` backend:
  retries, concurrency, and the request cache when there is a workspace); generate only.
- `blind` / `blind:BACKEND:MODEL` — a text-only LLM answering without the image (plain `blind`: the embedded
  local model); generate, and rank where the backend scores replies.
- the judge (`--judge BACKEND[:MODEL]`) scores a judged free-text answer against its references.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence


from cftools.answers import parse_number
from cftools.errors import CftoolsError, Hint, ModelCallsFailed
from cftools.evaluate.questions import PromptTemplates, Question
from cftools.kinds import get_kind
from cftools.evaluate.vlm import Prompt
from cftools.images import data_uri

RANK_HINT = Hint("rank mode needs token log-probabilities: use an hf: model, blind (the embedded model), or "
                 "{mode} generate", mode="--mode")


@dataclass
class ModelSpec:
    kind: str            # hf | openai | blind
    target: str          # model path/id (hf, openai) or "BACKEND:MODEL" / "" (blind)

    @property
    def needs_image(self) -> bool:
        return self.kind != "blind"

    def __str__(self) -> str:
        return f"{self.kind}:{self.target}" if self.target else self.kind


def parse_model_spec(spec: str) -> ModelSpec:
    kind, _, target = spec.partition(":")
    if kind == "hf" and target:
        return ModelSpec("hf", target)
    if kind == "openai" and target:
        return ModelSpec("openai", target)
    if kind == "blind":
        return ModelSpec("blind", target)
    raise CftoolsError(f"unknown model spec {spec!r}: use hf:PATH_OR_ID, openai:MODEL, blind or blind:BACKEND:MODEL")


# -- answerers -----------------------------------------------------------------------------------------------

def chat_messages(prompt: Prompt, with_images: bool) -> list[dict[str, Any]]:
    if not with_images or not prompt.images:
        return [{"role": "user", "content": prompt.text}]
    content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": data_uri(p)}}
                                     for p in prompt.images]
    content.append({"type": "text", "text": prompt.text})
    return [{"role": "user", "content": content}]


class ChatAnswerer:
    """Answers through a `cftools.llm` backend: bounded concurrency, retries, and the store's request cache."""

    def __init__(self, backend: Any, with_images: bool, store: Any = None, concurrency: int = 4,
                 quiet: bool = True) -> None:
        self.backend = backend
        self.with_images = with_images
        self.needs_image = with_images
        self.store = store
        self.concurrency = concurrency
        self.quiet = quiet

    def generate(self, prompts: Sequence[Prompt], schema: Any = None) -> list[str]:
        """The replies to PROMPTS; with SCHEMA (an OutputSchema) the backend is asked for it the way it takes it
        (`response_format`, constrained decoding, or the schema in the prompt)."""
        from cftools.llm import request_key
        from cftools.llm.runner import JobResult, Shown, run_jobs

        requests = []
        for index, prompt in enumerate(prompts):
            messages = chat_messages(prompt, self.with_images)
            params = {"temperature": 0.0, "max_tokens": prompt.max_new_tokens}
            if schema is not None:
                from cftools.llm.structured import structured_request

                messages, params = structured_request(self.backend, schema, messages, params)
            key = request_key(self.backend.cache_id, self.backend.model, messages, params)
            requests.append((index, messages, params, key))
        answers: dict[int, str] = {}
        ready: list[JobResult] = []
        todo = requests
        if self.store is not None:
            from cftools.llm.cache import cached_completions

            hits = cached_completions(self.store, [r[3] for r in requests])
            ready = [JobResult(job=r, ok=True, cached=True, value=hits[r[3]].text) for r in requests if r[3] in hits]
            todo = [r for r in requests if r[3] not in hits]

        def work(request: tuple) -> JobResult:
            _, messages, params, _ = request
            return JobResult(job=request, ok=True, value=self.backend.complete(messages, params).text)

        def write(results: list[JobResult]) -> None:
            fresh = [r for r in results if r.ok and not r.cached]
            if fresh and self.store is not None:
                from cftools.llm.base import Completion
                from cftools.llm.cache import save_completion

                with self.store.write() as session:
                    for r in fresh:
                        save_completion(session, r.job[3], self.backend.cache_id, self.backend.model,
                                        Completion(text=r.value))
            for r in results:
                if r.ok:
                    answers[r.job[0]] = r.value

        stats = run_jobs(todo, work, write, concurrency=self.concurrency, shown=Shown("model calls", quiet=self.quiet),
                         ready=ready)
        if stats.interrupted:
            raise KeyboardInterrupt
        missing = [i for i in range(len(prompts)) if i not in answers]
        if missing:
            reason = stats.errors[0] if stats.errors else "no answer"
            raise ModelCallsFailed(f"{len(missing)} model calls failed ({reason}); rerun to retry them",
                                   attempted=len(prompts), failed=len(missing))
        return [answers[i] for i in range(len(prompts))]

    def score_options(self, prompts: Sequence[Prompt]) -> list:
        """Rank the options of text-only questions with a backend that exposes log-probabilities (the embedded
        model); an API model cannot rank."""
        score_replies = getattr(self.backend, "score_replies", None)
        if score_replies is None or self.with_images:
            raise CftoolsError("rank mode needs token log-probabilities: use an hf: model or blind (the embedded "
                               "model)", hint=RANK_HINT)
        return [score_replies(chat_messages(p, False), list(p.options or [])) for p in prompts]

    def close(self) -> None:
        self.backend.close()


def load_answerer(spec: ModelSpec, device: str, dtype: str, llm_config: Optional[dict] = None,
                  store: Any = None, concurrency: int = 4, quiet: bool = True, allow_downloads: bool = False) -> Any:
    if spec.kind == "hf":
        from cftools.evaluate.vlm import HFVisionModel

        return HFVisionModel.load(spec.target, device=device, dtype=dtype, allow_downloads=allow_downloads)
    from cftools.llm import make_backend

    if spec.kind == "openai":
        backend = make_backend(llm_config, backend="openai", model=spec.target)
        return ChatAnswerer(backend, with_images=True, store=store, concurrency=concurrency, quiet=quiet)
    name, _, model = spec.target.partition(":")
    backend = make_backend(llm_config, backend=name or "local", model=model or None)
    return ChatAnswerer(backend, with_images=False, store=store,
                        concurrency=1 if (name or "local") == "local" else concurrency, quiet=quiet)


# -- the judge (MuCR Exp) -----------------------------------------------------------------------------------

# A judge often writes its score out of ten: "7/10", "7 out of 10".
_OUT_OF_TEN = re.compile(r"\s*(?:/|out of)\s*10\b", re.IGNORECASE)


def parse_judge_score(text: str) -> Optional[float]:
    value = parse_number(_OUT_OF_TEN.sub(" ", text or ""))
    if value is None or not 0 <= value <= 10:
        return None
    return float(value)


JUDGE_MAX_TOKENS = 32



def judge_answer(judge: ChatAnswerer, templates: PromptTemplates, question: Question, answer: str,
                 aggregate: str) -> dict[str, Any]:
    """The judge's verdict on a judged free-text answer, as its kind reads it (the prediction line's extra)."""
    kind = get_kind(question.kind)
    prompts = [Prompt(text, max_new_tokens=JUDGE_MAX_TOKENS)
               for text in kind.hooks.evaluate.judge_prompts(question, answer, templates)]
    schema = kind.hooks.evaluate.judge_schema()
    replies = judge.generate(prompts, schema=schema) if prompts else []
    return {**kind.hooks.evaluate.judge_result(question, [judge_reply_text(kind, schema, r) for r in replies],
                                               aggregate),
            "judge_replies": replies}


def judge_reply_text(kind: Any, schema: Any, reply: str) -> str:
    """A judge reply as the kind's scoring reads it: validated against the judge's schema, else (a judge that
    wrote free text) as it is, for the kind's own reader."""
    if schema is None:
        return reply
    from cftools.llm.structured import ReplyError

    try:
        return kind.hooks.evaluate.judge_reply(schema.read(reply))
    except ReplyError:
        return reply


