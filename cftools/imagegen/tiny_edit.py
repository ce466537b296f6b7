"""The embedded edit pipeline: a tiny InstructPix2Pix pipeline built from configs in code (random weights).

As `cftools.imagegen.tiny` for text-to-image: it exists so that `cftools generate edits`, the tests and `make
demo` run offline on a CPU with nothing downloaded. It has the shape of a real instruction-based edit pipeline
(`StableDiffusionInstructPix2PixPipeline`: a UNet that reads the noisy latent and the original image's latent,
8 input channels), the same tokenizer, text encoder and VAE configs as the tiny text-to-image pipeline, and its
64x64 edits are noise: nothing about them means anything. It is saved once with `save_pretrained` and loaded like
any other pipeline folder, so the embedded default runs the code path of a real model.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from cftools.imagegen.tiny import (BUILD_SEED, TINY_SIZE, VAE_SCALE, built_once,
                                  byte_level_clip_tokenizer, default_cache_dir, tiny_text_encoder)

TINY_EDIT_NAME = "tiny-ip2p-v1"  # bump when the configs below change, so old caches are not reused
TINY_EDIT_STEPS = 4
TINY_EDIT_GUIDANCE = 5.0
TINY_EDIT_SIZE = f"{TINY_SIZE}x{TINY_SIZE}"
# cftools made these random weights; they carry the project's own licence
TINY_EDIT_LICENCE = "Apache-2.0"


def build_tiny_edit_pipeline(workdir: Path):  # noqa: ANN201
    """A StableDiffusionInstructPix2PixPipeline of a few thousand random weights; WORKDIR gets the tokenizer."""
    import torch
    from diffusers import (AutoencoderKL, EulerAncestralDiscreteScheduler, StableDiffusionInstructPix2PixPipeline,
                           UNet2DConditionModel)

    with torch.random.fork_rng(devices=[]):  # seeded weights without disturbing the caller's RNG
        torch.manual_seed(BUILD_SEED)
        tokenizer = byte_level_clip_tokenizer(Path(workdir))
        text_encoder = tiny_text_encoder(tokenizer)
        # 8 input channels: the noisy latent and the original image's latent, as InstructPix2Pix
        unet = UNet2DConditionModel(
            sample_size=TINY_SIZE // VAE_SCALE, in_channels=8, out_channels=4, layers_per_block=1,
            block_out_channels=(8, 16), down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=32, attention_head_dim=2,
            norm_num_groups=4)
        vae = AutoencoderKL(
            in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 8, 16, 16), layers_per_block=1,
            down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
            norm_num_groups=4, sample_size=TINY_SIZE)
    scheduler = EulerAncestralDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear")
    pipe = StableDiffusionInstructPix2PixPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=scheduler, safety_checker=None,
        feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def embedded_edit_pipeline_folder(cache_dir: Path | None = None) -> Path:
    """The embedded edit pipeline's folder, built and saved on first use (see `built_once`)."""
    return built_once(Path(cache_dir) if cache_dir else default_cache_dir(), TINY_EDIT_NAME, save_tiny_edit_pipeline)


def save_tiny_edit_pipeline(folder: Path) -> Path:
    """Build the tiny edit pipeline and save it to FOLDER (a diffusers pipeline folder)."""
    from cftools.imagegen.diffusers_backend import quiet_libraries

    quiet_libraries()
    with tempfile.TemporaryDirectory() as work:
        build_tiny_edit_pipeline(Path(work)).save_pretrained(str(folder))
    return folder
