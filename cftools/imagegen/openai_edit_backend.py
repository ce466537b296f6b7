"""The `images.edit` backend: edits from any OpenAI-compatible images endpoint (`cftools.imagegen.edits`)."""

from __future__ import annotations

import hashlib
import time
from typing import Any, Optional

import PIL.Image

from cftools.imagegen.base import parse_size, size_text
from cftools.imagegen.edit_base import (EditCandidate, EditFailure, EditResult, EditSettings, checked_candidate,
                                        png_bytes)
from cftools.imagegen.openai_backend import OpenAIImageBackend
from cftools.llm.base import EndpointUnreachable, LLMError


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
        except EndpointUnreachable:  # not a failed candidate: the run stops, naming the URL
            raise
        except Exception as exc:  # LLMError: one line, never the key
            return [EditFailure(k, str(exc), self.name, self.model) for k in ks]
        seconds = (time.perf_counter() - started) / len(ks)
        results: list[EditResult] = []
        for k, image in zip(ks, images):
            if isinstance(image, str):
                results.append(EditFailure(k, image, self.name, self.model))
                continue
            results.append(checked_candidate(EditCandidate(k, image, {
                "backend": self.name, "model": self.model, "revision": None, "licence": self.licence,
                "pipeline": "images.edit", "instruction": instruction, "seed": None, "steps": None,
                "guidance": None, "image_guidance": None, "size": size_text(*image.size), "scheduler": None,
                "device": None, "dtype": None, "seconds": seconds, "candidate": k,
                "endpoint": self.cache_id, "requested_size": size}), (width, height)))
        return results

    def request_params(self, n: int, size: str) -> dict[str, Any]:
        # the original image is part of the request: the same instruction on another image differs
        return {"n": n, "size": size, "response_format": self.response_format,
                "edit_of": hashlib.sha256(self._source_png).hexdigest()}

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
