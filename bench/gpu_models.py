"""Full-size model shapes built from configs (random weights) for the GPU benches: nothing is downloaded.

- `build_llava_7b`: LLaVA-1.5-7B's shape (CLIP ViT-L/14 at 336 px, 576 image tokens; Llama-2-7B, 32 layers of
  4096; a vocabulary of 32064), with the byte-level tokenizer and chat template of tests/fixtures_eval.py, built
  straight on DEVICE in DTYPE (no CPU copy, no fp32 pass).
- `save_sd15_pipeline`: Stable Diffusion 1.5's shape (UNet 320/640/1280/1280, 2 layers a block, cross-attention
  768; VAE 128/256/512/512; a 12-layer CLIP text encoder of 768), text-to-image (DDIM) or, with EDIT,
  InstructPix2Pix's 8-channel UNet (Euler ancestral), saved as a diffusers pipeline folder in fp16.
- `write_jsonl`/`append_result`: figures appended one JSON line at a time, so a part stopped by its time limit
  keeps what it measured.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))


def append_result(path: str | None, record: dict[str, Any]) -> None:
    """One figure (a JSON object) appended to PATH, and printed."""
    record = {"at": round(time.time(), 3), **record}
    print(json.dumps(record), flush=True)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")


def llava_7b_config(tokenizer: Any, layers: int = 32, hidden: int = 4096, vision_layers: int = 24) -> Any:
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    return LlavaConfig(
        vision_config=CLIPVisionConfig(hidden_size=1024 if vision_layers == 24 else 64,
                                       intermediate_size=4096 if vision_layers == 24 else 96,
                                       num_hidden_layers=vision_layers, num_attention_heads=16 if vision_layers == 24
                                       else 4, image_size=336, patch_size=14, projection_dim=768),
        text_config=LlamaConfig(vocab_size=32064, hidden_size=hidden, intermediate_size=hidden * 11008 // 4096,
                                num_hidden_layers=layers, num_attention_heads=32 if hidden >= 1024 else 4,
                                num_key_value_heads=32 if hidden >= 1024 else 4, max_position_embeddings=4096,
                                bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                pad_token_id=tokenizer.pad_token_id),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"), vision_feature_select_strategy="default",
        vision_feature_layer=-2, projector_hidden_act="gelu")


def llava_processor(tokenizer: Any) -> Any:
    from fixtures_eval import CHAT_TEMPLATE
    from transformers import CLIPImageProcessor, LlavaProcessor

    image_processor = CLIPImageProcessor(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336})
    return LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=14, image_token="<image>",
                          vision_feature_select_strategy="default", num_additional_image_tokens=1,
                          chat_template=CHAT_TEMPLATE)


def build_llava_7b(device: str = "cuda", dtype: str = "bf16", small: bool = False) -> tuple[Any, Any]:
    """(model, processor) of LLaVA-1.5-7B's shape with random weights on DEVICE; SMALL: 2 thin layers (CPU checks)."""
    import torch
    from fixtures_eval import tiny_tokenizer
    from transformers import LlavaForConditionalGeneration

    tokenizer = tiny_tokenizer()
    config = (llava_7b_config(tokenizer, layers=2, hidden=64, vision_layers=2) if small
              else llava_7b_config(tokenizer))
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype)
    try:
        torch.manual_seed(0)
        with torch.device(device):  # weights are made where they run: no CPU init, no copy
            model = LlavaForConditionalGeneration(config).eval()
    finally:
        torch.set_default_dtype(previous)
    return model, llava_processor(tokenizer)


def parameter_counts(model: Any) -> dict[str, int]:
    """Parameters of the language model (embeddings excluded: they cost no FLOPs) and of the vision side."""
    language = sum(p.numel() for n, p in model.named_parameters()
                   if "language_model" in n and "embed_tokens" not in n)
    vision = sum(p.numel() for n, p in model.named_parameters() if "vision_tower" in n or "projector" in n)
    return {"language": language, "vision": vision}


def save_sd15_pipeline(folder: Path, edit: bool = False, device: str = "cuda") -> Path:
    """An SD-1.5-shaped (or, with EDIT, InstructPix2Pix-shaped) pipeline of random weights saved in fp16 to FOLDER."""
    import tempfile

    import torch
    from diffusers import (AutoencoderKL, DDIMScheduler, EulerAncestralDiscreteScheduler,
                           StableDiffusionInstructPix2PixPipeline, StableDiffusionPipeline, UNet2DConditionModel)
    from transformers import CLIPTextConfig, CLIPTextModel

    from cftools.imagegen.tiny import byte_level_clip_tokenizer

    folder = Path(folder)
    # Schedulers build their tables with numpy: made outside the device context (a CUDA default device breaks them).
    if edit:
        scheduler = EulerAncestralDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear")
    else:
        scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                  clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    with tempfile.TemporaryDirectory() as work, torch.device(device):
        torch.manual_seed(0)
        tokenizer = byte_level_clip_tokenizer(Path(work))
        text_encoder = CLIPTextModel(CLIPTextConfig(
            vocab_size=len(tokenizer), hidden_size=768, intermediate_size=3072, num_attention_heads=12,
            num_hidden_layers=12, max_position_embeddings=77, projection_dim=768,
            bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id))
        unet = UNet2DConditionModel(sample_size=64, in_channels=8 if edit else 4, out_channels=4, layers_per_block=2,
                                    block_out_channels=(320, 640, 1280, 1280), cross_attention_dim=768,
                                    attention_head_dim=8)
        vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4,
                            block_out_channels=(128, 256, 512, 512), layers_per_block=2,
                            down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                            sample_size=512)
        common = dict(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, safety_checker=None,
                      feature_extractor=None, requires_safety_checker=False)
        if edit:
            pipe = StableDiffusionInstructPix2PixPipeline(scheduler=scheduler, **common)
        else:
            pipe = StableDiffusionPipeline(scheduler=scheduler, **common)
        pipe.to(dtype=torch.float16)
        pipe.save_pretrained(str(folder))
    # random weights made here: the project's own licence (the edit backend reads it from the model card)
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\nRandom weights in SD-1.5's shape.\n",
                                      encoding="utf-8")
    return folder
