"""The `images.edit` backend: edits from any OpenAI-compatible images endpoint (`cftools.imagegen.edits`)."""

from __future__ import annotations

import hashlib
import time
from typing import Any, Optional

import PIL.Image

from cftools.imagegen.base import image_request_key, parse_size, size_text
from cftools.imagegen.edit_base import EditCandidate, EditFailure, EditResult, EditSettings, png_bytes
from cftools.imagegen.openai_backend import OpenAIImageBackend
from cftools.llm.base import LLMError


class OpenAIEditBackend(OpenAIImageBackend):
    """Edits from an OpenAI-compatible `images.edit` endpoint (multipart: the original PNG and the
    instruction; base64 replies). An API has no seed: the provenance records none."""

    def __init__(self, *, licence: Optional[str] = None, **options: Any) -> None:
        super().__init__(**options)
        self.licence = licence
        self._source_png: bytes = b""

    def edit(self, original: PIL.Image.Image, instruction: str, settings: EditSettings) -> list[EditResult]:
        ks = settings.ks()
        if not ks:
            return []
        width, height = parse_size(settings.size, self.default_size)
        self._source_png = png_bytes(original)
        size = size_text(width, height)
        started = time.perf_counter()
        try:
            images = self.generate_images(instruction, len(ks), size)
        except Exception as exc:  # LLMError: one line, never the key
            return [EditFailure(k, str(exc), self.name, self.model) for k in ks]
        seconds = (time.perf_counter() - started) / len(ks)
        results: list[EditResult] = []
        for k, image in zip(ks, images):
            if isinstance(image, str):
                results.append(EditFailure(k, image, self.name, self.model))
                continue
            results.append(EditCandidate(k, image, {
                "backend": self.name, "model": self.model, "revision": None, "licence": self.licence,
                "pipeline": "images.edit", "instruction": instruction, "seed": None, "steps": None,
                "guidance": None, "image_guidance": None, "size": size_text(*image.size), "scheduler": None,
                "device": None, "dtype": None, "seconds": seconds, "candidate": k,
                "endpoint": self.cache_id, "requested_size": size}))
        return results

    def generate_images(self, prompt: str, n: int, size: str) -> list:
        # the request cache key includes the original image: the same instruction on another image differs
        key = image_request_key(self.cache_id, self.model, None, prompt, None,
                                {"n": n, "size": size, "response_format": self.response_format,
                                 "edit_of": hashlib.sha256(self._source_png).hexdigest()})
        cached = self.request_cache.get(key) if self.request_cache is not None else None
        if cached is not None:
            return list(cached)
        images = self._call_images(prompt, n, size)
        if self.request_cache is not None and all(not isinstance(i, str) for i in images):
            self.request_cache.put(key, images)
        return images

    def _images_once(self, prompt: str, n: int, size: str) -> list[Any]:
        from cftools.llm.base import LLMError

        params: dict[str, Any] = {"model": self.model, "prompt": prompt, "n": n, "size": size,
                                  "image": ("original.png", self._source_png, "image/png")}
        if self.response_format:
            params["response_format"] = self.response_format
        response = self._client.images.edit(**params)
        data = getattr(response, "data", None)
        if not isinstance(data, list):
            raise LLMError("malformed images reply: no data list")
        return data
