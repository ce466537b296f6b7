"""The embedded default: a tiny Stable Diffusion pipeline built from configs in code (random weights).

It exists so that `cftools generate images` and `make demo` run offline with nothing downloaded: the weights are
random (seeded, so every build is the same), the images are 64x64 noise, and nothing about them means anything.
For real images point cftools at a local diffusers pipeline folder or an images API (`[images]` in cftools.toml).

The pipeline is built once and saved with `save_pretrained` to a cache folder; from then on it is loaded with
`from_pretrained` like any other local pipeline folder, so the embedded default runs the same code path as a
real model.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

TINY_NAME = "tiny-sd-v2"  # bump when the configs below change, so old caches are not reused
TINY_SIZE = 64
TINY_STEPS = 4
TINY_GUIDANCE = 5.0
VAE_SCALE = 8  # as SD: four VAE blocks, a 64x64 image is an 8x8 latent
TINY_TOKENS = 77  # as SD's CLIP text encoder, so prompt-length checks behave as with a real pipeline
BUILD_SEED = 0


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cftools"


def byte_level_clip_tokenizer(folder: Path):  # noqa: ANN202
    """A CLIP tokenizer whose vocabulary is every byte alone and byte + '</w>' (no merges): any text tokenizes."""
    from tokenizers import pre_tokenizers
    from transformers import CLIPTokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens = alphabet + [ch + "</w>" for ch in alphabet] + ["<|startoftext|>", "<|endoftext|>"]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    # paths positionally: the signature that both transformers 4 and 5 accept
    return CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=TINY_TOKENS)


def tiny_text_encoder(tokenizer):  # noqa: ANN001, ANN201
    """A 2-layer CLIP text encoder sized for TOKENIZER (random weights from the caller's seeded RNG)."""
    from transformers import CLIPTextConfig, CLIPTextModel

    return CLIPTextModel(CLIPTextConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37, num_attention_heads=4,
        num_hidden_layers=2, max_position_embeddings=TINY_TOKENS, projection_dim=32,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id))


def build_tiny_pipeline(workdir: Path):  # noqa: ANN201
    """A StableDiffusionPipeline of a few thousand random weights; WORKDIR receives the tokenizer files."""
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel

    with torch.random.fork_rng(devices=[]):  # seeded weights without disturbing the caller's RNG
        torch.manual_seed(BUILD_SEED)
        tokenizer = byte_level_clip_tokenizer(Path(workdir))
        text_encoder = tiny_text_encoder(tokenizer)
        unet = UNet2DConditionModel(
            sample_size=TINY_SIZE // VAE_SCALE, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(8, 16),
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            cross_attention_dim=32, attention_head_dim=2, norm_num_groups=4)
        # four VAE blocks -> SD's scale factor of 8 (sizes must be multiples of 8, as with a real pipeline); it
        # also keeps the UNet's work per image small, so the cost of a call is mostly its fixed overhead
        vae = AutoencoderKL(
            in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 8, 16, 16), layers_per_block=1,
            down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
            norm_num_groups=4, sample_size=TINY_SIZE)
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                   scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def save_tiny_pipeline(folder: Path) -> Path:
    """Build the tiny pipeline and save it to FOLDER (a diffusers pipeline folder with model_index.json)."""
    folder = Path(folder)
    from cftools.imagegen.diffusers_backend import quiet_libraries

    quiet_libraries()
    with tempfile.TemporaryDirectory() as work:
        build_tiny_pipeline(Path(work)).save_pretrained(str(folder))
    return folder


def embedded_pipeline_folder(cache_dir: Path | None = None) -> Path:
    """The embedded default's pipeline folder, built and saved on first use."""
    return built_once(Path(cache_dir) if cache_dir else default_cache_dir(), TINY_NAME, save_tiny_pipeline)


def built_once(cache: Path, name: str, save: Callable[[Path], Any]) -> Path:
    """CACHE/NAME, a pipeline folder SAVE writes, saved on first use.

    Built in a temporary sibling and renamed into place, so a run killed mid-save or two runs at once never
    leave a half-written folder behind.
    """
    folder = cache / name
    if (folder / "model_index.json").is_file():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache))
    try:
        save(staging / "pipe")
        try:
            os.replace(staging / "pipe", folder)
        except OSError:
            if not (folder / "model_index.json").is_file():  # not a concurrent build that won the race
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def tiny_img2img_pipeline(folder: Path):  # noqa: ANN201
    """The tiny pipeline folder loaded as an image-to-image pipeline (same weights)."""
    from diffusers import AutoPipelineForImage2Image

    pipe = AutoPipelineForImage2Image.from_pretrained(str(folder), local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    return pipe
