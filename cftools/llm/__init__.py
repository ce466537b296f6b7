"""LLM backends behind one interface: `make_backend(config)` then `backend.complete(messages, params)`.

- `openai`: any OpenAI-compatible chat endpoint (messages may hold image parts as data URLs).
- `local`: the embedded offline SmolLM2-135M-Instruct (text only).
A generator's output schema (`cftools.llm.structured`) reaches either: `response_format` to a server
(`[llm] structured_output = "json_schema"`, the default, or `"prompt"` for servers without it), constrained
decoding on the embedded model.
The request cache (`cftools.llm.cache`) and the concurrent runner (`cftools.llm.runner`) work with either.
"""

from __future__ import annotations

from typing import Any

from cftools.errors import Hint
from cftools.llm.base import DEFAULT_PARAMS, Backend, Completion, LLMError, Message, request_key, text_message

BACKENDS = ("local", "openai")

__all__ = ["BACKENDS", "DEFAULT_PARAMS", "Backend", "Completion", "LLMError", "Message", "make_backend",
           "request_key", "text_message", "split_model_spec"]


def split_model_spec(spec: str) -> tuple[str, str | None]:
    """'openai:gpt-4o-mini' -> ('openai', 'gpt-4o-mini'); 'local' -> ('local', None)."""
    backend, _, model = spec.partition(":")
    return backend, model or None


def make_backend(config: dict[str, Any] | None = None, backend: str | None = None, model: str | None = None,
                 **overrides: Any) -> Backend:
    """A backend from the workspace's [llm] section, with the command line's --backend/--model on top."""
    config = dict(config or {})
    if config.get("api_key"):
        raise LLMError("[llm] api_key is not read: keys never go into the workspace; put the key in an environment "
                       "variable and name it with [llm] api_key_env")
    config.update({k: v for k, v in overrides.items() if v is not None})
    name = backend or config.get("backend") or "local"
    if name == "local":
        from cftools.llm.local import LOCAL_MODEL, LocalBackend

        configured = config.get("model") if config.get("backend", "local") == "local" else None
        chosen = model or configured or LOCAL_MODEL
        if chosen != LOCAL_MODEL and not config.get("model_path"):
            # the bundled file would answer while every record named CHOSEN
            raise LLMError(f"the local backend has no model {chosen!r}: it runs the bundled {LOCAL_MODEL}, or the "
                           "GGUF file [llm] model_path names (the model is then that file's name in the records)")
        return LocalBackend(model=chosen, model_path=config.get("model_path"),
                            loader=config.get("loader", "auto"), threads=config.get("threads"))
    if name == "openai":
        from cftools.llm.openai_backend import DEFAULT_KEY_ENV, OpenAIBackend

        configured = config.get("model") if config.get("backend") == "openai" else None
        chosen = model or configured
        if not chosen:
            raise LLMError("the openai backend needs a model: [llm] model",
                           hint=Hint("the openai backend needs a model: {model} NAME or [llm] model", model="--model"))
        options = {k: config[k] for k in ("timeout", "request_attempts", "backoff_initial", "backoff_max",
                                          "max_connections", "max_reply_bytes") if k in config}
        from cftools.llm.structured import JSON_SCHEMA, STRUCTURED_MODES

        structured = config.get("structured_output") or JSON_SCHEMA
        if structured not in STRUCTURED_MODES:
            raise LLMError(f"[llm] structured_output = {structured!r}: use one of {', '.join(STRUCTURED_MODES)}")
        openai_backend = OpenAIBackend(model=chosen, base_url=config.get("base_url"),
                                       api_key_env=config.get("api_key_env") or DEFAULT_KEY_ENV, **options)
        # how this endpoint gets a generator's output schema (cftools.llm.structured)
        openai_backend.structured_output = structured
        return openai_backend
    raise LLMError(f"unknown LLM backend {name!r}; use one of {', '.join(BACKENDS)}")
