"""Structured output: a generator's reply declared once as a pydantic model, used three ways.

1. Sent to an OpenAI-compatible server as `response_format` (`json_schema`, strict): OpenAI constrains its
   decoding to the schema, and vLLM, SGLang and llama.cpp servers turn the same field into guided decoding. A
   server without it is configured with `[llm] structured_output = "prompt"`: the schema then goes into the
   prompt (`OutputSchema.instruction`) and the reply is only validated.
2. Turned into a grammar for the embedded model (`cftools.llm.local`, through llguidance), so that its output
   is valid by construction.
3. Every reply is validated and parsed against the model (`OutputSchema.read`); a reply that does not fit
   raises `ReplyError` with the reason, which the task runner records and retries.

The schema sent to a server is the strict subset every provider accepts (all fields required, no extra
fields, no length or range keywords, no `$ref`); the embedded model's grammar and the validation keep the
length and range bounds, which also stop a small model from rambling inside a string.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, ValidationError

# [llm] structured_output: how an OpenAI-compatible endpoint gets the schema.
JSON_SCHEMA = "json_schema"  # response_format, strict (OpenAI, vLLM, SGLang, llama.cpp server)
PROMPT = "prompt"  # the schema in the prompt, the reply validated (servers without response_format)
GRAMMAR = "grammar"  # the embedded model: constrained decoding
STRUCTURED_MODES = (JSON_SCHEMA, PROMPT)
# Keywords the strict mode of the hosted APIs does not take; they stay in the grammar and in validation.
UNPORTABLE = ("maxLength", "minLength", "maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum", "title",
              "default", "pattern")


class ReplyError(ValueError):
    """A reply that is not a JSON object of the schema; the message is the reason kept with the reply."""


class Reply(BaseModel):
    """Base of the output schemas: no field beyond those declared (strict mode needs it)."""

    model_config = ConfigDict(extra="forbid")


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with every `$ref` to `$defs` replaced by the definition (nested models, enums)."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {k: walk(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


def _portable(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: ({name: _portable(sub) for name, sub in v.items()} if k == "properties" else _portable(v))
               for k, v in node.items() if k not in UNPORTABLE}
        if out.get("type") == "object":
            out["additionalProperties"] = False
            out["required"] = list(out.get("properties", {}))
        return out
    if isinstance(node, list):
        return [_portable(v) for v in node]
    return node


@dataclass(frozen=True)
class OutputSchema:
    """A generator's reply: NAME (what the server sees, [a-zA-Z0-9_-]) and its pydantic MODEL."""

    name: str
    model: type[BaseModel]
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def _built(self) -> dict[str, Any]:
        """The full schema, the wire schema and the hash, built once: every request of a run asks for them, and
        copying or hashing the schema per request cost a CPU-bound client ~0.5 ms an item."""
        if not self._cache:
            schema = _inline_refs(self.model.model_json_schema())
            for node in _objects(schema):
                node["additionalProperties"] = False
            blob = json.dumps(schema, sort_keys=True, separators=(",", ":"))
            self._cache.update(full=schema, wire=_portable(schema),
                               hash=hashlib.sha256(blob.encode("utf-8")).hexdigest())
        return self._cache

    @property
    def json_schema(self) -> dict[str, Any]:
        """The full schema (with bounds): the embedded model's grammar."""
        return copy.deepcopy(self._built()["full"])

    @property
    def wire_schema(self) -> dict[str, Any]:
        """The strict subset sent as `response_format` and shown in prompts."""
        return copy.deepcopy(self._built()["wire"])

    @property
    def hash(self) -> str:
        """SHA-256 of the full schema (what a generation's provenance records)."""
        return self._built()["hash"]

    def response_format(self, full: bool = False) -> dict[str, Any]:
        """The `response_format` request field; FULL keeps the bounds (for the embedded model's grammar). The
        schema in it is shared by every request of SCHEMA: read it, do not change it."""
        built = self._built()
        return {"type": "json_schema",
                "json_schema": {"name": self.name, "strict": True, "schema": built["full" if full else "wire"]}}

    def instruction(self) -> str:
        """What a prompt says when the server cannot take `response_format`."""
        return ("Reply with one JSON object and nothing else. It must follow this JSON Schema:\n"
                + json.dumps(self._built()["wire"], separators=(",", ":")))

    def read(self, text: Optional[str]) -> BaseModel:
        """The reply as the model; raises ReplyError with a short reason. A fenced block (```json … ```) or text
        around the one object is tolerated: servers in prompt mode add them."""
        if not text or not text.strip():
            raise ReplyError("empty reply")
        body = _json_object(text)
        try:
            return self.model.model_validate_json(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "reply"
            raise ReplyError(f"not a {self.name} reply: {where}: {first.get('msg')}"
                             + (f" ({exc.error_count()} errors)" if exc.error_count() > 1 else "")) from None


def _objects(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        if node.get("type") == "object":
            found.append(node)
        for value in node.values():
            found += _objects(value)
    elif isinstance(node, list):
        for value in node:
            found += _objects(value)
    return found


def _json_object(text: str) -> str:
    """The text from its first "{" to its last "}" (the whole text when there is none: the validator says why)."""
    start, end = text.find("{"), text.rfind("}")
    return text[start:end + 1] if 0 <= start < end else text


def schema_provenance(schema: OutputSchema, mode: str) -> dict[str, Any]:
    """What a generation record keeps of the schema: name, hash, how it was sent, whether decoding was
    constrained (by our grammar, or by the server through strict `response_format`)."""
    return {"name": schema.name, "hash": schema.hash, "mode": mode, "constrained": mode in (GRAMMAR, JSON_SCHEMA)}


def backend_mode(backend: Any) -> str:
    """How BACKEND takes a schema: its `structured_output` (the embedded model: grammar; a server: json_schema
    unless configured "prompt")."""
    return getattr(backend, "structured_output", JSON_SCHEMA)


def structured_request(backend: Any, schema: OutputSchema, messages: list[dict[str, Any]],
                       params: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """MESSAGES and PARAMS asking BACKEND for a reply of SCHEMA: `response_format` (the embedded model gets the
    full schema for its grammar), or the schema's instruction at the end of the last message."""
    mode = backend_mode(backend)
    if mode != PROMPT:
        return messages, {**params, "response_format": schema.response_format(full=mode != JSON_SCHEMA)}
    last = dict(messages[-1])
    if isinstance(last.get("content"), list):
        last["content"] = [*last["content"], {"type": "text", "text": schema.instruction()}]
    else:
        last["content"] = f"{str(last.get('content') or '').rstrip()}\n\n{schema.instruction()}"
    return [*messages[:-1], last], params
