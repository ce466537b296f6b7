"""Evaluation fixtures: a tiny random LLaVA saved as a local model folder, and small releases written by hand.

The model is built from configs (no download): a byte-level tokenizer with no merges (every byte is one
token), a 2-layer CLIP vision tower and a 2-layer Llama; its processor carries a LLaVA-1.5-style chat
template. `bench/bench_rank.py` builds a larger one with the same function.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<image>"]
# Content is a list of parts, or (as lmms-eval's simple models send it) one string.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}USER: "
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>\n{% else %}{{ c['text'] }}{% endif %}{% endfor %}"
    "{% endif %} {% else %}ASSISTANT: {% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{{ c['text'] }}{% endfor %}{% endif %}</s>{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


def tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(SPECIALS)
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")


def build_tiny_llava(folder: Path, hidden: int = 32, layers: int = 2, image_size: int = 32, patch: int = 8,
                     max_positions: int = 512, seed: int = 0) -> Path:
    """Write a random LLaVA (model + processor with a chat template) to FOLDER; load it as hf:FOLDER."""
    import torch
    from transformers import (CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig,
                              LlavaForConditionalGeneration, LlavaProcessor)

    tok = tiny_tokenizer()
    image_processor = CLIPImageProcessor(size={"shortest_edge": image_size},
                                         crop_size={"height": image_size, "width": image_size})
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tok, patch_size=patch,
                               image_token="<image>", vision_feature_select_strategy="default",
                               num_additional_image_tokens=1, chat_template=CHAT_TEMPLATE)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(hidden_size=hidden, intermediate_size=hidden + 5, num_hidden_layers=layers,
                                       num_attention_heads=4, image_size=image_size, patch_size=patch,
                                       projection_dim=hidden),
        text_config=LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden + 5,
                                num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                max_position_embeddings=max_positions, bos_token_id=tok.bos_token_id,
                                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        image_token_index=tok.convert_tokens_to_ids("<image>"), vision_feature_select_strategy="default",
        vision_feature_layer=-1)
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def png_bytes(seed: int, size: int = 40) -> bytes:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def write_release(folder: Path, records: list[dict[str, Any]], images: dict[str, bytes] | None = None) -> Path:
    """A minimal native release: records.jsonl, images/<sha256>.png, manifest.json.

    `images` maps a record id to the PNG bytes of its image; the record's `image` field is filled in.
    """
    folder = Path(folder)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for record in records:
        data = (images or {}).get(record["id"])
        if data is not None:
            sha = hashlib.sha256(data).hexdigest()
            (folder / "images" / f"{sha}.png").write_bytes(data)
            record["image"], record["image_sha256"] = f"images/{sha}.png", sha
        else:
            record.setdefault("image", None)
            record.setdefault("image_sha256", None)
    lines = [json.dumps(r, sort_keys=True) for r in records]
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    # Like an exported manifest, it lists every file's SHA-256: changed records give a changed manifest.
    files = [{"path": path.relative_to(folder).as_posix(), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
              "size": path.stat().st_size}
             for path in sorted(folder.rglob("*")) if path.is_file() and path.name != "manifest.json"]
    (folder / "manifest.json").write_text(json.dumps({"name": folder.name, "counts": {"items": len(records)},
                                                      "files": files}), encoding="utf-8")
    return folder


def cvqa_record(i: int, group: str, original_answer: str, answer: str, answer_type: str) -> dict[str, Any]:
    return {
        "id": f"cvqa-{i}", "kind": "cvqa", "group": group, "split": "test", "verified": True, "status": "accepted",
        "original_question": f"How many birds are there in picture {i}?" if answer_type == "number"
        else f"Is there a bird in picture {i}?",
        "original_answer": original_answer, "answer_type": answer_type,
        "question": f"How many birds would there be if {i} more flew in?" if answer_type == "number"
        else f"Would there be a bird if it flew away from picture {i}?",
        "answer": answer, "options": None, "data": {},
    }


def cfmm_record(i: int, group: str) -> dict[str, Any]:
    return {
        "id": f"cfmm-{i}", "kind": "cfmm", "group": group, "split": "test", "verified": True, "status": "accepted",
        "original_question": "What color is the car?", "original_answer": "red", "answer_type": "other",
        "question": "What color would the car be if it were painted blue?", "answer": "blue",
        "options": {"original": ["red", "green"], "counterfactual": ["yellow", "blue", "red", "black"]},
        "data": {},
    }


@pytest.fixture(scope="session")
def tiny_llava_dir(tmp_path_factory) -> Path:
    return build_tiny_llava(tmp_path_factory.mktemp("tiny-llava"))


@pytest.fixture
def mixed_release(tmp_path) -> Path:
    """6 C-VQA items (one without an image) and 2 CFMM items with options."""
    records = [
        cvqa_record(1, "numerical-direct", "2", "3", "number"),
        cvqa_record(2, "numerical-direct", "4", "2", "number"),
        cvqa_record(3, "numerical-indirect", "1", "0", "number"),
        cvqa_record(4, "boolean", "yes", "no", "yes/no"),
        cvqa_record(5, "boolean", "no", "yes", "yes/no"),
        cvqa_record(6, "boolean", "yes", "no", "yes/no"),
        cfmm_record(7, "color"),
        cfmm_record(8, "color"),
    ]
    images = {r["id"]: png_bytes(n) for n, r in enumerate(records) if r["id"] != "cvqa-6"}
    return write_release(tmp_path / "release-1.0", records, images)
