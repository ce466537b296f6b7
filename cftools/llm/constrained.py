"""Constrained decoding for the embedded model: a JSON Schema becomes a token mask at every step, so the reply is
valid by construction. The grammar engine is llguidance (MIT; chosen by measurement over xgrammar, see
bench/bench_structured.py): it compiles a schema in milliseconds and computes a mask in ~0.05 ms per token on the
CPU. Here is only the glue to transformers' `generate` (a LogitsProcessor) and a cache of compiled grammars.
"""

from __future__ import annotations

import threading
from typing import Any

from cftools.llm.base import LLMError

_LOCK = threading.Lock()
_TOKENIZERS: dict[int, Any] = {}  # id(hf tokenizer) -> llguidance tokenizer (building one takes ~0.4 s)
_GRAMMARS: dict[str, str] = {}  # schema JSON -> llguidance grammar


def llguidance_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("llguidance") is not None


def _llguidance() -> Any:
    try:
        import llguidance
        import llguidance.hf  # noqa: F401
        import llguidance.numpy  # noqa: F401
    except ImportError:
        raise LLMError("structured output on the embedded model needs llguidance: pip install 'cftools[local]'") \
            from None
    return llguidance


def compile_grammar(schema: dict[str, Any]) -> str:
    """The llguidance grammar of a JSON Schema (compact JSON: no whitespace between tokens), cached; raises on a
    schema it cannot compile."""
    import json

    llg = _llguidance()
    key = json.dumps(schema, sort_keys=True)
    with _LOCK:
        if key not in _GRAMMARS:
            grammar = llg.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
            error = llg.LLMatcher.validate_grammar(grammar)
            if error and not error.startswith("WARNING"):
                raise LLMError(f"cannot compile the output schema into a grammar: {error}")
            _GRAMMARS[key] = grammar
        return _GRAMMARS[key]


def guidance_tokenizer(tokenizer: Any) -> Any:
    llg = _llguidance()
    with _LOCK:
        if id(tokenizer) not in _TOKENIZERS:
            _TOKENIZERS[id(tokenizer)] = llg.hf.from_tokenizer(tokenizer)
        return _TOKENIZERS[id(tokenizer)]


def json_logits_processor(tokenizer: Any, schema: dict[str, Any]) -> Any:
    """A fresh transformers LogitsProcessor that allows only the tokens that keep the reply on SCHEMA (one per
    `generate` call: it follows that call's tokens)."""
    import numpy as np
    import torch
    from transformers import LogitsProcessor

    llg = _llguidance()
    lltok = guidance_tokenizer(tokenizer)
    matcher = llg.LLMatcher(lltok, compile_grammar(schema))
    mask = llg.numpy.allocate_token_bitmask(1, lltok.vocab_size)

    class SchemaMask(LogitsProcessor):
        def __init__(self) -> None:
            self.started = False

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            if self.started:
                matcher.consume_token(int(input_ids[0, -1]))
            self.started = True
            if matcher.is_error():
                raise LLMError(f"constrained decoding failed: {matcher.get_error()}")
            llg.numpy.fill_next_token_bitmask(matcher, mask)
            # bit i of the mask allows token i; tokens past the tokenizer's vocabulary (padding) are never allowed
            # (unpacked here rather than with llguidance's torch helper, which compiles a kernel on first use)
            bits = np.unpackbits(mask.view(np.uint8), bitorder="little")
            width = scores.shape[-1]
            allowed = np.zeros(width, dtype=bool)
            allowed[:min(width, bits.size)] = bits[:width].astype(bool)
            return scores.masked_fill(~torch.from_numpy(allowed).to(scores.device), float("-inf"))

    return SchemaMask()
