"""Hugging Face image-text-to-text models for evaluation: loading, batched generation, option ranking.

`HFVisionModel` wraps `AutoModelForImageTextToText` + `AutoProcessor` (LLaVA-1.5/1.6, Qwen2-VL,
InstructBLIP and whatever else they serve with a chat template), from a local folder or an id that is
already in the local cache: nothing is downloaded (`local_files_only=True`) unless the caller allows it
(`allow_downloads`, `cftools eval --allow-downloads` or CFTOOLS_ALLOW_DOWNLOADS=1). HF_HUB_OFFLINE is never set
for the process: other libraries in it keep their own setting.

- Every question is its own conversation: the processor's chat template renders one user turn with
  one image placeholder per image and the prompt text, plus the generation prompt.
- **generate**: real batches, LEFT padding (so every row's last token is its own last prompt token) with the
  attention mask and positions generate() derives from it, greedy decoding, `torch.inference_mode`. A batch's
  questions of different `max_new_tokens` are generated apart and each reply is cut at its own limit and end of
  turn, so a reply does not depend on which questions share its batch. With compiled decoding (`cftools eval
  --compile`, `use_compiled_decoding`) the replies are decoded on a static KV cache that transformers compiles on a
  GPU (`compiled_decoding_options`); prompts are then padded to a multiple of PROMPT_BUCKET tokens and a short call
  is filled with copies of its first prompt up to the widest call's rows (`filler_rows`, replies dropped), so a run
  compiles one graph per prompt bucket, not one per batch.
- **rank**: each option is scored as the assistant's reply. The reply text is what the chat template
  renders for an assistant turn holding the option, cut at the end of the option (the template's
  leading space or newline is kept, the end-of-turn marker is not); its tokens are those that
  tokenize(prefix + reply) adds after tokenize(prefix). The prompt prefix is run ONCE per
  question with `use_cache=True`; then option j of every question in the batch is scored in one short
  forward pass on that cache, which is cut back to the prefix after each pass (`DynamicCache.crop`), so
  memory grows with batch x prefix once, never with the number of options. Per option the result
  holds `sum_logprob` (sum of the option tokens' log-probabilities; highest wins), `mean_loss`
  (mean negative log-probability per option token, length-normalised; lowest wins) and `n_tokens`.
  Prompt prefixes of several questions share a batch with left padding and explicit position ids; for
  models with multi-axis rotary positions (Qwen2-VL family) each prefix runs on its own.
  `score_options_full` is the reference (one full forward pass per option) used by the benchmark.

- **preparation** (`prepare`): the CPU side of a batch (chat template, image decoding, the processor, option token
  ids) apart from the device side, so `cftools.evaluate.prefetch` can prepare the next batch on a background thread
  while this one runs; `generate` and `score_options` prepare inline when handed nothing prepared, so both paths run
  the same code. Decoded images are kept in a small LRU cache (keyed by path, modification time and size: a
  repeated image is decoded once, a changed file again). On CUDA the prepared tensors are pinned and copied
  with `non_blocking=True`. Tokenizer calls hold one lock (the Rust tokenizer refuses concurrent mutation).

On CUDA the default dtype is bf16 (fp16 where bf16 is not supported); on CPU fp32.
"""

from __future__ import annotations

import inspect
import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from cftools.errors import CftoolsError, Hint

DTYPES = ("auto", "bf16", "fp16", "fp32")
DEVICES = ("auto", "cuda", "cpu")
SCORES = ("mean-loss", "sum-logprob")
# Models whose rotary positions are not one index per token: their prefixes are never batched together.
MULTI_AXIS_POSITION_MODELS = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v", "glm4v_moe")


@dataclass
class Prompt:
    """One question as one fresh conversation: the user text, its images, and (for ranking) the options."""

    text: str
    images: list[Path] = field(default_factory=list)
    options: Optional[list[str]] = None
    max_new_tokens: int = 16


def by_answer_length(prompts: Sequence[Prompt]) -> dict[int, list[int]]:
    """Indices of PROMPTS per `max_new_tokens`, in order: the groups one generation call each can take."""
    groups: dict[int, list[int]] = {}
    for index, prompt in enumerate(prompts):
        groups.setdefault(prompt.max_new_tokens, []).append(index)
    return groups


def crop_to(cache: Any, length: int) -> None:
    """Cut a transformers cache back to LENGTH tokens (newer versions take the count to remove, older the length)."""
    parameter = next(iter(inspect.signature(cache.crop).parameters))
    if parameter == "tokens_to_remove":
        extra = cache.get_seq_length() - length
        if extra:
            cache.crop(-extra)
    else:
        cache.crop(length)


def best_option(option_scores: Sequence[dict[str, float]], score: str) -> Optional[int]:
    """Index of the winning option: lowest mean loss, or highest summed log-probability. None when no option wins:
    the best score is shared (a tie), a score is NaN, or none is finite (a missing loss is infinite): picking the
    first would be a guess."""
    if score not in SCORES:
        raise CftoolsError(f"unknown score {score!r}; choose one of {', '.join(SCORES)}")
    sign = 1.0 if score == "mean-loss" else -1.0  # lower is better after the sign
    key = "mean_loss" if score == "mean-loss" else "sum_logprob"
    values = [sign * float(s[key]) if s.get(key) is not None else math.inf for s in option_scores]
    finite = [i for i, value in enumerate(values) if math.isfinite(value)]
    if not finite or any(math.isnan(value) for value in values):
        return None  # nothing scored, or a score that is no number: the options cannot be compared
    best = min(values[i] for i in finite)
    winners = [i for i in finite if values[i] == best]
    return winners[0] if len(winners) == 1 else None


def resolve_device(device: str) -> str:
    import torch

    if device not in DEVICES:
        raise CftoolsError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise CftoolsError("the device cuda was asked for but torch sees no CUDA GPU",
                           hint=Hint("{device} cuda was asked for but torch sees no CUDA GPU", device="--device"))
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    import torch

    if dtype not in DTYPES:
        raise CftoolsError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if dtype != "auto":
        return dtype
    if device == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "fp32"


def torch_dtype(name: str):  # noqa: ANN201
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def in_local_cache(path_or_id: str) -> bool:
    """Whether PATH_OR_ID is a local model folder or a hub id whose config.json is in the local cache."""
    if Path(path_or_id).is_dir():
        return (Path(path_or_id) / "config.json").is_file()
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(path_or_id, "config.json"), str)
    except ValueError:  # not a valid repo id either
        return False


class UnreadableImage(CftoolsError):
    """An image file that cannot be decoded; PATH says which (the eval runner names the record asking it)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: cannot read the image ({reason})")
        self.path = Path(path)


def load_image(path: Path):  # noqa: ANN201
    from PIL import Image

    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (OSError, ValueError) as exc:
        raise UnreadableImage(path, str(exc)) from None


IMAGE_CACHE_SIZE = 64  # decoded images kept per model (a 1024 px RGB image is 3 MiB)


class ImageCache:
    """Decoded images by (path, modification time, size), the least recently used dropped past SIZE; thread-safe."""

    def __init__(self, size: int = IMAGE_CACHE_SIZE) -> None:
        self.size = size
        self._images: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: Path):  # noqa: ANN201
        try:
            stat = Path(path).stat()
        except OSError as exc:
            raise UnreadableImage(path, exc.strerror or str(exc)) from None
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if key in self._images:
                self._images.move_to_end(key)
                return self._images[key]
        image = load_image(path)  # decoded outside the lock: two threads may decode at once
        with self._lock:
            self._images[key] = image
            while len(self._images) > self.size:
                self._images.popitem(last=False)
        return image


@dataclass
class Prepared:
    """The CPU side of one call (`generate` or `rank`) on a batch: per group of prompts run together, the prompts'
    indices in the batch, their inputs (CPU tensors, pinned on CUDA), and the group's answer length (generate)
    or its options' token ids (rank)."""

    mode: str
    groups: list[tuple[list[int], dict[str, Any], Any]]


def pinned(value: Any) -> Any:
    """VALUE in page-locked memory when it is a CPU tensor (its copy to the GPU can then run asynchronously)."""
    import torch

    return value.pin_memory() if isinstance(value, torch.Tensor) and not value.is_pinned() else value


# Set to 1 to make compiled decoding the default of `cftools eval` (its --compile/--no-compile decide when given).
COMPILE_ENV = "CFTOOLS_COMPILE"
COMPILED_DECODING = {"cache_implementation": "static"}  # generate()'s options for it
# Compiled decoding pads every prompt (on the left) to a multiple of this many tokens: a static cache's length, hence
# a compiled graph, is one per (prompt bucket, answer length), not one per batch's longest prompt.
PROMPT_BUCKET = 64


def compile_by_default() -> bool:
    """Whether CFTOOLS_COMPILE asks for compiled decoding (the default when --compile/--no-compile is not given)."""
    return os.environ.get(COMPILE_ENV, "").strip().lower() not in ("", "0", "no", "off", "false")


def compiled_decoding_options(compiled: bool) -> dict[str, Any]:
    """generate()'s options for compiled decoding when COMPILED, else none: a static KV cache, which transformers
    compiles (torch.compile, CUDA graphs) on a GPU and runs uncompiled on the CPU.

    Measured on an H200 (LLaVA-1.5-7B shape, batch 32, 690 prompt tokens, 16 new): a decoding step took 30 ms in
    eager mode, of which the GPU's kernels ran about 15 (the rest it waited on Python launching ~1,350 of them);
    compiled, `cftools eval` answered 1.54x as many questions a second (30.2 against 19.6). Off by default: each
    new shape compiles again (34 to 51 s each there), which pays back only over thousands of questions."""
    return dict(COMPILED_DECODING) if compiled else {}


def filler_rows(count: int, widest: int) -> int:
    """How many copies of a group's first prompt fill a compiled call of COUNT prompts up to WIDEST rows (the most
    any compiled call had): the last, short batch then reuses the full batches' graphs instead of compiling its
    own; the copies' replies are dropped."""
    return max(widest - count, 0)


# Set to 1 to let `hf:` models be downloaded from the hub (off by default: evaluation works offline).
ALLOW_DOWNLOADS_ENV = "CFTOOLS_ALLOW_DOWNLOADS"

class HFVisionModel:
    """An image-text-to-text model with its processor, ready to answer and rank."""

    needs_image = True

    def __init__(self, model: Any, processor: Any, device: str = "cpu", dtype: str = "fp32",
                 name: str = "hf", compiled: bool = False) -> None:
        self.model = model.eval()
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.device = device
        self.dtype = dtype
        self.name = name
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if getattr(processor, "chat_template", None) is None and getattr(self.tokenizer, "chat_template", None) is None:
            raise CftoolsError(f"{name}: the processor has no chat template; cftools eval needs one to build prompts")
        model_type = getattr(model.config, "model_type", "")
        accepts_positions = "position_ids" in inspect.signature(model.forward).parameters
        self.batch_prefixes = accepts_positions and model_type not in MULTI_AXIS_POSITION_MODELS
        # Only the logits that score something are computed (the prefix's last one; the option's own).
        self.keep_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self.image_cache = ImageCache()
        self.widest = 0  # the most rows a compiled generate() call has had (filler rows pad shorter ones to it)
        self.use_compiled_decoding(compiled)
        # the next batch is prepared on another thread while this one decodes its replies: one tokenizer user at once
        self.tokenizer_lock = threading.RLock()

    def use_compiled_decoding(self, compiled: bool) -> None:
        """Decode generated replies on a static KV cache (compiled by transformers on a GPU), prompts padded to
        PROMPT_BUCKET tokens and short calls filled to the widest one, when COMPILED; else as transformers does."""
        self.compiled = bool(compiled)
        # extra options of every generate() call: a static cache when compiled decoding is asked for
        self.generate_options: dict[str, Any] = compiled_decoding_options(self.compiled)

    @classmethod
    def load(cls, path_or_id: str, device: str = "auto", dtype: str = "auto",
             allow_downloads: bool = False, compiled: bool = False) -> "HFVisionModel":
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        device = resolve_device(device)
        dtype = resolve_dtype(dtype, device)
        local_only = not (allow_downloads or os.environ.get(ALLOW_DOWNLOADS_ENV, "0") not in ("", "0"))
        offline = "; it is not a local folder or in the local cache, and downloads are off" if local_only else ""
        hint = (Hint(f"{{message}} ({{allow}} or {ALLOW_DOWNLOADS_ENV}=1 allows them)", allow="--allow-downloads")
                if local_only else None)
        if local_only and not in_local_cache(path_or_id):
            # asked before transformers is: some releases (4.56) still request processor files from the
            # hub under local_files_only=True
            raise CftoolsError(f"cannot load hf:{path_or_id} (no config.json in the folder or cache){offline}",
                               hint=hint)
        try:
            processor = AutoProcessor.from_pretrained(path_or_id, local_files_only=local_only)
            model = AutoModelForImageTextToText.from_pretrained(path_or_id, dtype=torch_dtype(dtype),
                                                                local_files_only=local_only)
        except (OSError, ValueError) as exc:
            raise CftoolsError(f"cannot load hf:{path_or_id} ({str(exc).splitlines()[0][:300]}){offline}",
                               hint=hint) from None
        return cls(model.to(device), processor, device, dtype, name=f"hf:{path_or_id}", compiled=compiled)

    # -- prompts --------------------------------------------------------------------------------------

    def _messages(self, prompt: Prompt, reply: Optional[str] = None) -> list[dict[str, Any]]:
        content = [{"type": "image"} for _ in prompt.images] + [{"type": "text", "text": prompt.text}]
        messages = [{"role": "user", "content": content}]
        if reply is not None:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": reply}]})
        return messages

    def _template(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return self.processor.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                                  tokenize=False)

    def prefix_text(self, prompt: Prompt) -> str:
        """The rendered conversation up to where the assistant's reply starts."""
        return self._template(self._messages(prompt), add_generation_prompt=True)

    def reply_text(self, prompt: Prompt, prefix: str, option: str) -> str:
        """How the chat template writes OPTION as the assistant's reply after PREFIX (end-of-turn cut off)."""
        full = self._template(self._messages(prompt, option), add_generation_prompt=False)
        end = full.rfind(option)
        if full.startswith(prefix) and end >= len(prefix):
            return full[len(prefix):end + len(option)]
        return option

    def _encode(self, texts: list[str], prompts: Sequence[Prompt]) -> dict[str, Any]:
        return self._to_device(self._cpu_inputs(texts, prompts))

    def _cpu_inputs(self, texts: list[str], prompts: Sequence[Prompt], bucket: Optional[int] = None) -> dict[str, Any]:
        """The processor's inputs for TEXTS and PROMPTS' images, on the CPU (pinned when the model is on CUDA);
        padded to a multiple of BUCKET tokens when given."""
        images = [self.image_cache.get(path) for prompt in prompts for path in prompt.images]
        kwargs: dict[str, Any] = {"text": texts, "return_tensors": "pt", "padding": True}
        if bucket:
            kwargs["pad_to_multiple_of"] = bucket
        if images:
            kwargs["images"] = images
        with self.tokenizer_lock:
            self.tokenizer.padding_side = "left"
            encoded = dict(self.processor(**kwargs))
        if str(self.device).startswith("cuda"):
            encoded = {key: pinned(value) for key, value in encoded.items()}
        return encoded

    def _to_device(self, encoded: Any) -> dict[str, Any]:
        import torch

        out = {}
        for key, value in dict(encoded).items():
            if isinstance(value, torch.Tensor):
                # a pinned tensor's copy is queued behind the GPU's work; the cast after it is on the same stream
                value = value.to(self.device, non_blocking=value.is_pinned())
                if value.is_floating_point():
                    value = value.to(torch_dtype(self.dtype))
            out[key] = value
        return out

    def prepare(self, mode: str, prompts: Sequence[Prompt]) -> Prepared:
        """The CPU side of `generate` (MODE generate) or `score_options` (rank) on PROMPTS; safe on another thread."""
        if mode == "generate":
            groups = []
            for limit, indices in by_answer_length(prompts).items():
                chosen = [prompts[i] for i in indices]
                if self.compiled:  # one compiled graph per prompt bucket: filled to the widest call, bucketed
                    self.widest = max(self.widest, len(chosen))
                    chosen += [chosen[0]] * filler_rows(len(chosen), self.widest)
                encoded = self._cpu_inputs([self.prefix_text(p) for p in chosen], chosen,
                                           PROMPT_BUCKET if self.compiled else None)
                # Some tokenizers add token_type_ids, which generate() of vision-language models refuses before
                # transformers 4.57 and ignores after; the model never uses them.
                encoded.pop("token_type_ids", None)
                groups.append((indices, encoded, limit))
            return Prepared(mode, groups)
        if mode != "rank":
            raise CftoolsError(f"unknown mode {mode!r}")
        together = self.batch_prefixes or len(prompts) <= 1
        runs = [list(range(len(prompts)))] if together else [[i] for i in range(len(prompts))]
        groups = []
        for indices in runs:
            chosen = [prompts[i] for i in indices]
            prefixes = [self.prefix_text(p) for p in chosen]
            option_ids = [self._option_ids(p, prefix) for p, prefix in zip(chosen, prefixes)]
            groups.append((indices, self._cpu_inputs(prefixes, chosen), option_ids))
        return Prepared(mode, groups)

    # -- generation ------------------------------------------------------------------------------------

    def generate(self, prompts: Sequence[Prompt], prepared: Optional[Prepared] = None) -> list[str]:
        """Greedy answers to a batch of questions (left padded), one string each; PREPARED is `prepare("generate",
        PROMPTS)` made ahead (made here when not given).

        A reply never depends on the other questions of the batch: questions of different `max_new_tokens` are
        generated apart (a batch runs to one length, so a 16-token question beside a 128-token one would be
        answered in 128), and each reply is cut at its own limit and at its own end of turn."""
        if not prompts:
            return []
        prepared = prepared or self.prepare("generate", prompts)
        replies: list[str] = [""] * len(prompts)
        try:
            for indices, inputs, limit in prepared.groups:
                for index, text in zip(indices, self._generate_same_length(inputs, limit)):
                    replies[index] = text
        except Exception:
            # (out of memory, say) the caller may ask again with fewer prompts: fill no call back up to this width
            self.widest = 0
            raise
        return replies

    def _generate_same_length(self, inputs: dict[str, Any], max_new: int) -> list[str]:
        import torch

        encoded = self._to_device(inputs)
        with torch.inference_mode():
            output = self.model.generate(**encoded, max_new_tokens=max_new, do_sample=False, num_beams=1,
                                         pad_token_id=self.tokenizer.pad_token_id, **self.generate_options)
        new_tokens = output[:, encoded["input_ids"].shape[1]:].tolist()
        with self.tokenizer_lock:
            return [self.tokenizer.decode(self._own_reply(row, max_new), skip_special_tokens=True).strip()
                    for row in new_tokens]

    def end_of_turn_ids(self) -> set[int]:
        """The tokens that end a reply: the tokenizer's end of sequence and the model's generation config's."""
        configured = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids = set(configured) if isinstance(configured, (list, tuple)) else {configured}
        return (ids | {self.tokenizer.eos_token_id}) - {None}

    def _own_reply(self, tokens: list[int], limit: int) -> list[int]:
        """A row's reply tokens up to its own limit and its first end-of-turn token (a finished row is padded
        while the batch goes on; the padding is not part of its reply)."""
        tokens = tokens[:limit]
        stops = self.end_of_turn_ids()
        end = next((n for n, token in enumerate(tokens) if token in stops), len(tokens))
        return tokens[:end]

    # -- ranking ---------------------------------------------------------------------------------------

    def _option_ids(self, prompt: Prompt, prefix: str) -> list[list[int]]:
        """Token ids of each option's reply as they follow the prefix: the tail of tokenize(prefix + reply)
        after tokenize(prefix) (so SentencePiece word-boundary markers come out right), or the reply
        tokenized alone where the joint tokenization does not extend the prefix's."""
        def tokenize(text: str) -> list[int]:
            with self.tokenizer_lock:
                return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

        prefix_ids = tokenize(prefix)
        ids = []
        for option in prompt.options or []:
            reply = self.reply_text(prompt, prefix, option)
            joint = tokenize(prefix + reply)
            tokens = (joint[len(prefix_ids):] if joint[:len(prefix_ids)] == prefix_ids and len(joint) > len(prefix_ids)
                      else tokenize(reply))
            if not tokens:
                raise CftoolsError(f"option {option!r} has no tokens")
            ids.append(tokens)
        return ids

    def _keep(self, n: int) -> dict[str, int]:
        return {"logits_to_keep": n} if self.keep_logits else {}

    def score_options(self, prompts: Sequence[Prompt],
                      prepared: Optional[Prepared] = None) -> list[list[dict[str, float]]]:
        """Per question, per option: sum_logprob, mean_loss and n_tokens; the prefix runs once per question.
        PREPARED is `prepare("rank", PROMPTS)` made ahead (made here when not given)."""
        if not prompts:
            return []
        prepared = prepared or self.prepare("rank", prompts)
        results: list[list[dict[str, float]]] = [[] for _ in prompts]
        for indices, inputs, option_ids in prepared.groups:
            for index, scores in zip(indices, self._score_shared_prefix(inputs, option_ids)):
                results[index] = scores
        return results

    def _score_shared_prefix(self, inputs: dict[str, Any],
                             option_ids: list[list[list[int]]]) -> list[list[dict[str, float]]]:
        import torch

        encoded = self._to_device(inputs)
        mask = encoded["attention_mask"]
        results: list[list[Optional[dict[str, float]]]] = [[None] * len(ids) for ids in option_ids]
        with torch.inference_mode():
            if len(option_ids) > 1:
                encoded["position_ids"] = (mask.long().cumsum(-1) - 1).clamp(min=0)
            out = self.model(**encoded, use_cache=True, **self._keep(1))
            cache = out.past_key_values
            prefix_len = cache.get_seq_length()
            first_logits = out.logits[:, -1:, :]
            start = mask.long().sum(-1).unsqueeze(1)
            # Option slot j of every question in one pass over the shared cache, then the cache is cut back
            # to the prefix: memory holds batch x (prefix + one option), never a copy of the prefix per option.
            for j in range(max(len(ids) for ids in option_ids)):
                slot = [ids[j] if j < len(ids) else [] for ids in option_ids]
                self._score_slot(slot, j, cache, prefix_len, mask, first_logits, start, results)
        return [[score for score in per_prompt] for per_prompt in results]  # type: ignore[misc]

    def _score_slot(self, slot: list[list[int]], j: int, cache: Any, prefix_len: int, mask: Any,
                    first_logits: Any, start: Any, results: list) -> None:
        """Score option J of every question (a row without one gets one pad token, ignored) on CACHE."""
        import torch

        width = max(max(len(ids) for ids in slot), 1)
        pad = self.tokenizer.pad_token_id
        rows = [ids or [pad] for ids in slot]
        opt = torch.tensor([ids + [pad] * (width - len(ids)) for ids in rows], device=mask.device)
        opt_mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in rows], device=mask.device,
                                dtype=mask.dtype)
        kwargs: dict[str, Any] = {}
        if self.batch_prefixes:
            kwargs["position_ids"] = start + torch.arange(width, device=mask.device).unsqueeze(0)
        follow = self.model(input_ids=opt, attention_mask=torch.cat([mask, opt_mask], dim=1), past_key_values=cache,
                            use_cache=True, **kwargs)
        crop_to(cache, prefix_len)
        logits = torch.cat([first_logits, follow.logits[:, :-1, :]], dim=1).float()
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, opt.unsqueeze(-1)).squeeze(-1) * opt_mask
        # each row's sum as before, read back in one transfer (one host sync per slot, not one per question)
        totals = torch.stack([logprobs[b, :max(len(ids), 1)].sum() for b, ids in enumerate(slot)]).tolist()
        for b, ids in enumerate(slot):
            if ids:
                total = totals[b]
                results[b][j] = {"sum_logprob": total, "mean_loss": -total / len(ids), "n_tokens": len(ids)}

    def score_options_full(self, prompt: Prompt) -> list[dict[str, float]]:
        """Reference scoring: one full forward pass (prefix + option) per option, no cache reuse."""
        import torch

        prefix = self.prefix_text(prompt)
        encoded = self._encode([prefix], [prompt])
        scores = []
        with torch.inference_mode():
            for ids in self._option_ids(prompt, prefix):
                option = torch.tensor([ids], device=encoded["input_ids"].device)
                inputs = dict(encoded)
                inputs["input_ids"] = torch.cat([encoded["input_ids"], option], dim=1)
                inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
                logits = self.model(**inputs, use_cache=False, **self._keep(len(ids) + 1)).logits
                logits = logits[0, -len(ids) - 1:-1].float()
                total = float(torch.log_softmax(logits, -1).gather(-1, option[0].unsqueeze(-1)).sum())
                scores.append({"sum_logprob": total, "mean_loss": -total / len(ids), "n_tokens": len(ids)})
        return scores

    def close(self) -> None:
        self.model = None
