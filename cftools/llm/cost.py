"""What model calls cost: the workspace's price table, tokens and money per run, and prompt-token counts.

Prices are the user's (`[llm.prices."MODEL"]` in cftools.toml: `input_per_mtok`, `output_per_mtok` in money per
million tokens, `batch_discount` the share taken off for `--batch-api`); none are shipped, since providers change
them. A model without a price has tokens but no cost ("unknown"), never a made-up one. A paid reply that carries no
token counts (no `usage`) is charged at its worst case (its prompt and its whole `max_tokens`, the figure a budget
reserved for it), recorded with its call (`worst_case_cost` in the call's parameters) and said so, never as $0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from sqlalchemy import select

from cftools.errors import WorkspaceError
from cftools.llm.base import Completion, LLMError, Message, render_messages
from cftools.models import Generation

PRICE_FIELDS = ("input_per_mtok", "output_per_mtok", "batch_discount")
WORST_CASE_COST = "worst_case_cost"  # Completion.extra / Generation.params: what a reply without usage was charged
CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text with BPE tokenizers, used only when no tokenizer is here


class BudgetReached(LLMError):
    """A model call not started: its worst-case cost would take the spending past --max-cost."""


@dataclass(frozen=True)
class Price:
    model: str
    input_per_mtok: float
    output_per_mtok: float
    batch_discount: float = 0.0  # 0.5 = half price through the Batch API; none assumed unless configured

    def cost(self, prompt_tokens: int, completion_tokens: int, batch: bool = False) -> float:
        full = (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1_000_000
        return full * (1.0 - self.batch_discount) if batch else full


def price_for(config: dict[str, Any], model: str) -> Optional[Price]:
    """MODEL's price from the [llm] section's `prices` table (None when it has none); a bad entry is one clear
    error naming cftools.toml and the entry."""
    table = config.get("prices") or {}
    if not isinstance(table, dict):
        raise WorkspaceError('cftools.toml: [llm] prices must be a table of [llm.prices."MODEL"] entries')
    entry = table.get(model)
    if entry is None:
        return None
    where = f'cftools.toml: [llm.prices."{model}"]'
    if not isinstance(entry, dict):
        raise WorkspaceError(f"{where} must be a table with {', '.join(PRICE_FIELDS)}")
    unknown = sorted(set(entry) - set(PRICE_FIELDS))
    if unknown:
        raise WorkspaceError(f"{where}: unknown field {unknown[0]!r} (use {', '.join(PRICE_FIELDS)})")
    values = {}
    for name in PRICE_FIELDS:
        value = entry.get(name, 0.0 if name == "batch_discount" else None)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise WorkspaceError(f"{where}: {name} must be a number >= 0, got {value!r}")
        values[name] = float(value)
    if values["batch_discount"] >= 1:
        raise WorkspaceError(f"{where}: batch_discount is the share taken off (0.5 = half price); it must be < 1")
    return Price(model=model, **values)


@dataclass
class Usage:
    """Tokens and money of one run: paid calls (synchronous and through batches), and cache hits (not paid)."""

    price: Optional[Price] = None
    requests: int = 0
    batch_requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hits: int = 0
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    cost: float = 0.0
    saved: float = 0.0  # what the cache hits would have cost
    unmetered: int = 0  # paid replies without token counts, charged at their worst case
    unmetered_cost: float = 0.0

    def add(self, completion: Completion, fresh: bool) -> None:
        prompt, output = completion.prompt_tokens or 0, completion.completion_tokens or 0
        if fresh:
            batch = bool(completion.extra.get("batch_id"))
            self.requests += 1
            self.batch_requests += batch
            self.prompt_tokens += prompt
            self.completion_tokens += output
            worst = completion.extra.get(WORST_CASE_COST)
            if completion.prompt_tokens is None or completion.completion_tokens is None:
                self.unmetered += 1
                self.unmetered_cost += float(worst or 0.0)
            if self.price is not None:
                self.cost += float(worst) if worst is not None else self.price.cost(prompt, output, batch)
        else:
            self.cache_hits += 1
            self.cached_prompt_tokens += prompt
            self.cached_completion_tokens += output
            if self.price is not None:
                self.saved += self.price.cost(prompt, output)

    def as_dict(self) -> dict[str, Any]:
        priced = self.price is not None
        return {"requests": self.requests, "batch_requests": self.batch_requests,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cache_hits": self.cache_hits, "cached_prompt_tokens": self.cached_prompt_tokens,
                "cached_completion_tokens": self.cached_completion_tokens,
                "cost": round(self.cost, 6) if priced else None, "saved_by_cache": round(self.saved, 6) if priced else None,
                "priced": priced, "replies_without_usage": self.unmetered,
                "cost_at_worst_case": round(self.unmetered_cost, 6) if priced else None}

    def summary(self) -> str:
        """One line for the terminal."""
        cost = money(self.cost) if self.price is not None else "cost unknown (no [llm.prices] entry for the model)"
        batch = f" ({self.batch_requests} through the Batch API)" if self.batch_requests else ""
        saved = f", {money(self.saved)} saved" if self.price is not None and self.cache_hits else ""
        return (f"tokens in {self.prompt_tokens:,}, out {self.completion_tokens:,} over {self.requests} calls{batch}; "
                f"{self.cache_hits} cache hits ({self.cached_prompt_tokens + self.cached_completion_tokens:,} tokens "
                f"not paid{saved}); {cost}" + self.unmetered_note())

    def unmetered_note(self) -> str:
        """What the summary says of replies that carried no token counts (empty when there were none)."""
        if not self.unmetered:
            return ""
        charged = f", counted at their worst case {money(self.unmetered_cost)}" if self.price is not None else ""
        return f"; {self.unmetered} replies carried no token counts (no usage){charged}"


def money(amount: float) -> str:
    return f"${amount:,.4f}" if amount < 1 else f"${amount:,.2f}"


# ------------------------------------------------------------------ counting prompt tokens before any call
@dataclass
class TokenCounter:
    """Counts a request's prompt tokens: `exact` when the model's own tokenizer does it, else an estimate."""

    count: Callable[[list[Message]], int]
    exact: bool
    source: str  # "counted with the tokenizer of MODEL", or "estimated at ... (why)"


def estimated_tokens(messages: list[Message]) -> int:
    return max(1, -(-len(render_messages(messages)) // CHARS_PER_TOKEN))


def token_counter(backend: Any, config: dict[str, Any]) -> TokenCounter:
    """The model's tokenizer when one is on this machine ([llm] tokenizer = a tokenizer folder, or the embedded
    local model's), else characters / 4, labelled as an estimate."""
    path = config.get("tokenizer")
    try:
        if path:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            return TokenCounter(_chat_counter(tokenizer), True, f"counted with the tokenizer at {path}")
        if getattr(backend, "name", None) == "local":
            tokenizer = local_tokenizer(backend)
            if tokenizer is not None:
                return TokenCounter(_chat_counter(tokenizer), True, f"counted with the tokenizer of {backend.model}")
    except Exception as exc:  # noqa: BLE001 (no tokenizer is a reason to estimate, not to stop)
        return TokenCounter(estimated_tokens, False, f"estimated at {CHARS_PER_TOKEN} characters a token "
                                                     f"(the tokenizer could not be loaded: {type(exc).__name__})")
    return TokenCounter(estimated_tokens, False, f"estimated at {CHARS_PER_TOKEN} characters a token (no tokenizer "
                                                 f"of {getattr(backend, 'model', 'the model')} here; set [llm] "
                                                 "tokenizer to a tokenizer folder to count exactly)")


def local_tokenizer(backend: Any) -> Any:
    """The embedded model's tokenizer (loaded with the model; None when it runs under llama.cpp)."""
    backend.load()
    loaded = getattr(backend, "_loaded", None)
    if isinstance(loaded, tuple) and hasattr(loaded[0], "apply_chat_template"):
        return loaded[0]
    return None


def _chat_counter(tokenizer: Any) -> Callable[[list[Message]], int]:
    def count(messages: list[Message]) -> int:
        chat = [{"role": m.get("role", "user"), "content": render_messages([m])} for m in messages]
        if getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
            ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # transformers 5 returns an encoding
        else:
            ids = tokenizer(render_messages(messages))["input_ids"]
        return len(ids[0]) if ids and isinstance(ids[0], list) else len(ids)

    return count


# ------------------------------------------------------------------ what the store's calls cost (`status --cost`)
def spending(store: Any, config: dict[str, Any]) -> list[dict[str, Any]]:
    """Tokens, cache hits and cost of every recorded call, per generator and model, priced with the workspace's
    table today (a model without a price has cost None)."""
    with store.session() as session:
        totals = usage_by(session, config)
    return [{"generator": generator, "model": model, **usage.as_dict()}
            for (generator, model), usage in sorted(totals.items())]


def usage_by(session: Any, config: dict[str, Any], *columns: Any) -> dict[tuple, Usage]:
    """The recorded calls' usage per generator, model and the Generation COLUMNS given (a key of their values in
    that order), each priced with its model's entry in CONFIG's price table."""
    totals: dict[tuple, Usage] = {}
    read = (Generation.cached, Generation.prompt_tokens, Generation.completion_tokens, Generation.params,
            Generation.generator, Generation.model, *columns)
    for cached, prompt, output, params, *key in session.execute(select(*read)).yield_per(5000):
        usage = totals.get(tuple(key))
        if usage is None:
            usage = totals[tuple(key)] = Usage(price=price_for(config, key[1]))
        recorded = params if isinstance(params, dict) else {}
        extra = {k: recorded[k] for k in ("batch_id", WORST_CASE_COST) if recorded.get(k) is not None}
        usage.add(Completion(text="", prompt_tokens=prompt, completion_tokens=output, extra=extra), fresh=not cached)
    return totals
