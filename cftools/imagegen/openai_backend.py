"""Any OpenAI-compatible images endpoint through the `openai` SDK (`images.generate`, base64 replies).

It is the chat backend (`cftools.llm.openai_backend.OpenAIBackend`) with an images call: the same API key
handling (from the environment variable the configuration names, never stored, printed or put in error text),
the same client, and the same retries (429/5xx, connection errors and time-outs, waiting what Retry-After asks).

An Images API has no seed, so the pair cannot be siamese here: the cause and effect prompts each get one call for
the n candidates, and the contextual descriptions alone keep the two alike. It has no negative prompt either: the
style's negative prompt is appended to the prompt as "Avoid: ...". A reply that is not valid base64 or not an image
fails only its own candidate.
"""

from __future__ import annotations

import base64
import binascii
import io
import time
from dataclasses import dataclass
from typing import Any, Callable

import openai
import PIL.Image

from cftools.imagegen.base import (
    CAUSE, EFFECT, CandidateFailure, CandidatePair, CandidateResult, PairSettings, Provenance, image_request_key,
    parse_size, size_text,
)
from cftools.imagegen.styles import Style, as_style
from cftools.errors import CftoolsError
from cftools.llm.base import EndpointUnreachable, LLMError
from cftools.llm.openai_backend import DEFAULT_KEY_ENV, OpenAIBackend, is_retryable
from cftools.llm.reply_cap import DEFAULT_MAX_IMAGES_REPLY_BYTES, too_large

DEFAULT_SIZE = (1024, 1024)
# The most pixels a reply's image may have ([images] max_pixels): its header is read first, so a 10000x10000 reply
# is refused before it is decoded (3 bytes a pixel, and copies: gigabytes).
DEFAULT_MAX_PIXELS = 4096 * 4096


class ImageReplyError(Exception):
    """One image of a reply is unusable (invalid base64, not an image); its candidate fails, not the call."""


def decode_image(b64: Any, max_pixels: int = DEFAULT_MAX_PIXELS) -> PIL.Image.Image:
    if not isinstance(b64, str) or not b64:
        raise ImageReplyError("the reply has no b64_json image")
    try:
        data = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageReplyError(f"invalid base64 in the reply ({exc})") from None
    try:
        image = PIL.Image.open(io.BytesIO(data))  # reads the header only
        width, height = image.size
        if width * height > max_pixels:
            raise ImageReplyError(f"the reply's image is {width}x{height} pixels, more than the {max_pixels} "
                                  "allowed ([images] max_pixels)")
        image.load()
    except (OSError, PIL.Image.DecompressionBombError, SyntaxError, ValueError) as exc:
        raise ImageReplyError(f"the reply's base64 is not an image ({type(exc).__name__})") from None
    return image.convert("RGB")


def prompt_with_negative(prompt: str, negative: str | None) -> str:
    return f"{prompt}. Avoid: {negative}" if negative else prompt


@dataclass(frozen=True)
class ImagesEndpoint:
    """Where an Images API is and how it is called (the [images] or [edits] keys); the key is only named."""

    base_url: str | None = None
    api_key_env: str = DEFAULT_KEY_ENV
    timeout: float = 120.0
    request_attempts: int = 6
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    response_format: str | None = "b64_json"
    quality: str | None = None
    default_size: str | tuple[int, int] | None = None
    max_pixels: int | None = None
    max_reply_bytes: int = DEFAULT_MAX_IMAGES_REPLY_BYTES
    setting: str = "[images] base_url"  # named when the endpoint cannot be reached


class OpenAIImageBackend(OpenAIBackend):
    """Candidate images from an Images API; see the module docstring."""

    name = "openai"

    def __init__(self, model: str, endpoint: ImagesEndpoint = ImagesEndpoint(), *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(model=model, base_url=endpoint.base_url, api_key_env=endpoint.api_key_env,
                         timeout=endpoint.timeout, request_attempts=endpoint.request_attempts,
                         backoff_initial=endpoint.backoff_initial, backoff_max=endpoint.backoff_max, sleep=sleep,
                         max_connections=8, max_reply_bytes=endpoint.max_reply_bytes, setting=endpoint.setting)
        # gpt-image models always answer in base64 and refuse the parameter; older and compatible ones need it
        self.response_format = endpoint.response_format
        self.quality = endpoint.quality
        self.default_size = parse_size(endpoint.default_size, DEFAULT_SIZE)
        self.max_pixels = int(endpoint.max_pixels or DEFAULT_MAX_PIXELS)
        # Optional request cache (`get(key)` -> images or None, `put(key, images)`), e.g. the store's: an
        # identical request (model, prompt, n, size, format) returns the stored images and makes no call.
        self.request_cache: Any = None

    def __repr__(self) -> str:  # never the key
        return f"OpenAIImageBackend(model={self.model!r}, base_url={self.base_url!r}, api_key_env={self.api_key_env!r})"

    def generate_pair(self, cause_prompt: str, effect_prompt: str, *, style: Style | str | None = None,
                      settings: PairSettings = PairSettings(), generator_key: str = "") -> list[CandidateResult]:
        """Candidates k = 0..n-1 (or settings.candidates) of one pair; seed, steps and guidance do not apply to an
        API."""
        chosen = as_style(style)
        ks = settings.ks()
        if not ks:
            return []
        width, height = parse_size(settings.size, self.default_size)
        prompts = {side: prompt_with_negative(chosen.prompt(text), chosen.negative(text))
                   for side, text in ((CAUSE, cause_prompt), (EFFECT, effect_prompt))}
        made: dict[str, list[PIL.Image.Image | str]] = {}
        seconds: dict[str, float] = {}
        for side in (CAUSE, EFFECT):
            started = time.perf_counter()
            try:
                made[side] = self.generate_images(prompts[side], len(ks), size_text(width, height))
            except LLMError as exc:
                # the pair cannot be completed: skip the other side's call, the run goes on
                return [CandidateFailure(k, side, str(exc), self.name, self.model) for k in ks]
            seconds[side] = (time.perf_counter() - started) / len(ks)
        results: list[CandidateResult] = []
        for i, k in enumerate(ks):
            failed = next((side for side in (CAUSE, EFFECT) if isinstance(made[side][i], str)), None)
            if failed:
                results.append(CandidateFailure(k, failed, str(made[failed][i]), self.name, self.model))
                continue
            provenance = {side: Provenance(
                backend=self.name, model=self.model, revision=None, prompt=prompts[side], negative_prompt=None,
                seed=None, steps=None, guidance=None, size=size_text(*made[side][i].size), scheduler=None,
                consistency=None, device=None, dtype=None, seconds=seconds[side], style=chosen.name, candidate=k,
                side=side, extra={"endpoint": self.cache_id, "requested_size": size_text(width, height)})
                for side in (CAUSE, EFFECT)}
            results.append(CandidatePair(k, made[CAUSE][i], made[EFFECT][i], provenance[CAUSE], provenance[EFFECT]))
        return results

    def generate_images(self, prompt: str, n: int, size: str) -> list[PIL.Image.Image | str]:
        """N images for PROMPT (an unusable one is its failure reason instead); a failed call raises LLMError.
        With a request cache, an identical earlier request's images come back without a call."""
        key = image_request_key(self.cache_id, self.model, None, prompt, None, self.request_params(n, size))
        cached = self.request_cache.get(key) if self.request_cache is not None else None
        if cached is not None:
            return list(cached)
        images = self._call_images(prompt, n, size)
        if self.request_cache is not None and all(not isinstance(i, str) for i in images):
            self.request_cache.put(key, images)
        return images

    def request_params(self, n: int, size: str) -> dict[str, Any]:
        """What besides model and prompt makes two requests the same request (the request cache's key)."""
        return {"n": n, "size": size, "response_format": self.response_format, "quality": self.quality}

    def _call_images(self, prompt: str, n: int, size: str) -> list[PIL.Image.Image | str]:
        failure: CftoolsError | None = None
        try:
            data = self.retrying()(self.attempt, self._images_once, prompt, n, size)
        except EndpointUnreachable as exc:  # not a failed candidate: the run stops, naming the URL
            failure = exc
        except openai.APIError as exc:
            capped = too_large(exc)
            failure = self.unreachable(exc) or LLMError(str(capped) if capped else self.describe(exc),
                                                        retryable=is_retryable(exc))
        except LLMError as exc:  # our own reading of the reply: its message says it all already
            failure = LLMError(self.describe_text(str(exc)))
        except Exception as exc:  # a body the SDK cannot read
            failure = LLMError("malformed images reply: " + self.describe(exc))
        if failure is not None:
            raise failure  # raised outside the handler: no chained exception can carry the key
        images: list[PIL.Image.Image | str] = []
        for i in range(n):
            try:
                images.append(decode_image(getattr(data[i], "b64_json", None) if i < len(data) else None,
                                           self.max_pixels))
            except ImageReplyError as exc:
                images.append(self.describe_text(str(exc) if i < len(data) else
                                                 f"the reply holds {len(data)} images, not {n}"))
        return images

    def _images_once(self, prompt: str, n: int, size: str) -> list[Any]:
        params: dict[str, Any] = {"model": self.model, "prompt": prompt, "n": n, "size": size}
        if self.response_format:
            params["response_format"] = self.response_format
        if self.quality:
            params["quality"] = self.quality
        response = self._client.images.generate(**params)
        data = getattr(response, "data", None)
        if not isinstance(data, list):
            raise LLMError("malformed images reply: no data list")
        return data
