"""First-frame masking: composition with the sim background, the three modes, SAM3's errors, and the `sam3` mode run
on a tiny random SAM3 written in transformers' format (the user's code path: from_config -> Sam3Segmenter ->
post_process_instance_segmentation), alone and inside `simforcing generate`."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from simforcing.config import ConfigError, load_config
from simforcing.data.format import DataError
from simforcing.masking import FirstFrameMasker, Sam3Segmenter, background_pixels, compose_masked_frame
from simforcing.sampler_batch import SamplerBatch


def _batch(b=2, f=3, h=8, w=12, masks=True, seed=0) -> SamplerBatch:
    g = torch.Generator().manual_seed(seed)
    real, sim = torch.rand(b, 3, f, h, w, generator=g) * 2 - 1, torch.rand(b, 3, f, h, w, generator=g) - 1
    arm = torch.rand(b, f, h, w, generator=g) > 0.5
    return SamplerBatch(first_frame=real[:, :, 0], actions=torch.zeros(b, 8, 7), state0=torch.zeros(b, 7),
                        text=torch.zeros(b, 4, 16), text_mask=None, arm_mask=arm[:, 0] if masks else None,
                        recorded_sim=sim, recorded_real=real, episode_ids=[f"ep{i}" for i in range(b)])


def test_composition_keeps_the_arm_and_fills_the_background():
    batch = _batch()
    frame, mask = batch.first_frame, batch.arm_mask
    for rgb in [(0, 0, 0), (10, 200, 255)]:
        out = compose_masked_frame(frame, mask, rgb)
        m = mask[:, None].expand_as(frame)
        assert torch.equal(out[m], frame[m])  # arm pixels untouched
        want = torch.tensor(rgb, dtype=torch.float32) / 127.5 - 1  # colour in [-1, 1]
        bg = out.permute(0, 2, 3, 1)[~mask]  # (n, 3) background pixels
        assert torch.allclose(bg, want.expand_as(bg))
    assert background_pixels((0, 0, 0)).flatten().tolist() == [-1.0, -1.0, -1.0]
    with pytest.raises(ValueError, match=r"\(B, H, W\)"):
        compose_masked_frame(frame, mask[:, :4], (0, 0, 0))


def test_mask_file_mode_uses_the_stored_first_frame_mask():
    batch = _batch()
    masked, mask = FirstFrameMasker("mask-file", (0, 0, 0))(batch)
    assert torch.equal(mask, batch.arm_mask)
    assert torch.equal(masked, compose_masked_frame(batch.first_frame, batch.arm_mask, (0, 0, 0)))


def test_mask_file_mode_without_masks_names_the_file_and_the_alternatives():
    with pytest.raises(DataError, match="arm_mask.npz") as e:
        FirstFrameMasker("mask-file", (0, 0, 0))(_batch(masks=False))
    assert "sam3" in str(e.value) and "paired-sim" in str(e.value) and e.value.kind == "missing_arm_mask"
    assert "ep0" in str(e.value)  # the episodes without a mask are named


def test_paired_sim_mode_returns_the_sim_first_frame():
    batch = _batch()
    masked, mask = FirstFrameMasker("paired-sim", (0, 0, 0))(batch)
    assert mask is None and torch.equal(masked, batch.recorded_sim[:, :, 0])
    with pytest.raises(DataError, match="recorded_sim"):
        FirstFrameMasker("paired-sim", (0, 0, 0))(replace(batch, recorded_sim=None))


def test_sam3_mode_composes_the_segmenters_mask():
    batch = _batch()
    seen = []

    def fake_segmenter(frames):  # (B, 3, H, W) -> (B, H, W): "arm" = bright red channel
        seen.append(frames)
        return frames[:, 0] > 0.2

    cfg = load_config("demo", ["--sample.mask_mode=sam3", "--data.sim_background=30,40,50"])
    masker = FirstFrameMasker.from_config(cfg, segmenter=fake_segmenter)
    masked, mask = masker(batch)
    frame = batch.first_frame
    assert torch.equal(seen[0], frame)  # the segmenter sees the real first frame
    assert torch.equal(mask, frame[:, 0] > 0.2)
    assert torch.equal(masked, compose_masked_frame(frame, frame[:, 0] > 0.2, (30, 40, 50)))


def test_sam3_without_a_path_or_torchvision_says_what_to_do(monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match="sample.sam3_path"):
        Sam3Segmenter(None)
    cfg = load_config("demo", ["--sample.mask_mode=sam3"])
    with pytest.raises(ConfigError, match="sample.sam3_path"):
        FirstFrameMasker.from_config(cfg)
    with pytest.raises(ConfigError, match="sample.sam3_path") as e:
        Sam3Segmenter(str(tmp_path / "nothing"))
    assert "config.json" in str(e.value)
    find_spec = importlib.util.find_spec  # torchvision is installed here (the sam3 extra): hide it
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchvision"
                        else find_spec(name, *a))
    with pytest.raises(ImportError) as e:
        Sam3Segmenter("/models/sam3")
    msg = str(e.value)
    assert "torchvision" in msg and "`sam3` extra" in msg and "sample.sam3_path='/models/sam3'" in msg


def test_unknown_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="sample.mask_mode"):
        FirstFrameMasker("box", (0, 0, 0))


# -- SAM3 on a tiny random model ---------------------------------------------------------------------------------------
def write_tiny_sam3(folder: Path) -> Path:
    """A random SAM3 saved as the real one is: ``Sam3Model`` (2-layer ViT on 56 x 56 images, 8 queries, width 32) and
    ``Sam3Processor`` (CLIP tokenizer over a 60-token vocabulary built here, no download) via ``save_pretrained``.

    Two weights are set so the default thresholds select: the presence logit is +10 (the concept is "present") and the
    query projection is scaled x100, so the query scores spread over (0, 1) around 0.5."""
    from transformers import (CLIPTextConfig, CLIPTokenizer, Sam3Config, Sam3DETRDecoderConfig, Sam3DETREncoderConfig,
                              Sam3GeometryEncoderConfig, Sam3ImageProcessor, Sam3MaskDecoderConfig, Sam3Model,
                              Sam3Processor, Sam3VisionConfig, Sam3ViTConfig)

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in "abcdefghijklmnopqrstuvwxyz":
        vocab[ch], vocab[ch + "</w>"] = len(vocab), len(vocab) + 1
    merges = []
    for word in ("robot", "arm"):  # BPE merges that build each word left to right: r+o, ro+b, rob+o, robo+t</w>
        parts = list(word[:-1]) + [word[-1] + "</w>"]
        while len(parts) > 1:
            merges.append((parts[0], parts[1]))
            parts = [parts[0] + parts[1]] + parts[2:]
            vocab.setdefault(parts[0], len(vocab))
    tokenizer = CLIPTokenizer(vocab=vocab, merges=merges)
    assert tokenizer.convert_ids_to_tokens(tokenizer("robot arm").input_ids) == [
        "<|startoftext|>", "robot</w>", "arm</w>", "<|endoftext|>"]
    d = dict(hidden_size=32, num_attention_heads=2, intermediate_size=64)
    config = Sam3Config(
        vision_config=Sam3VisionConfig(
            backbone_config=Sam3ViTConfig(**d, num_hidden_layers=2, image_size=56, patch_size=14, window_size=2,
                                          global_attn_indexes=[1], pretrain_image_size=56),
            fpn_hidden_size=32, backbone_feature_sizes=[[16, 16], [8, 8], [4, 4]]),  # 4 x 4 patches, x4 x2 x1
        text_config=CLIPTextConfig(**d, vocab_size=len(vocab), projection_dim=32, num_hidden_layers=1,
                                   max_position_embeddings=32, bos_token_id=0, eos_token_id=1, pad_token_id=1),
        geometry_encoder_config=Sam3GeometryEncoderConfig(**d, num_layers=1, roi_size=2),
        detr_encoder_config=Sam3DETREncoderConfig(**d, num_layers=1),
        detr_decoder_config=Sam3DETRDecoderConfig(**d, num_layers=1, num_queries=8),
        mask_decoder_config=Sam3MaskDecoderConfig(hidden_size=32, num_attention_heads=2))
    torch.manual_seed(0)
    model = Sam3Model(config).eval()
    with torch.no_grad():
        model.detr_decoder.presence_head.layer3.bias.fill_(10.0)
        model.dot_product_scoring.query_proj.weight.mul_(100.0)
    model.save_pretrained(folder)
    processor = Sam3Processor(image_processor=Sam3ImageProcessor(size={"height": 56, "width": 56},
                                                                 mask_size={"height": 16, "width": 16}),
                              tokenizer=tokenizer)
    processor.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_sam3(tmp_path_factory) -> Path:
    return write_tiny_sam3(tmp_path_factory.mktemp("sam3"))


def reference_sam3_mask(folder: Path, frames: torch.Tensor, prompt: str = "robot arm") -> torch.Tensor:
    """The arm mask (B, H, W) computed here from SAM3's raw outputs: the union of the masks (sigmoid > 0.5, resized
    bilinearly to the frame) of the queries whose score sigmoid(logit) * sigmoid(presence) is > 0.5."""
    from transformers import Sam3Model, Sam3Processor

    b, _, h, w = frames.shape
    model = Sam3Model.from_pretrained(folder, local_files_only=True).eval()
    processor = Sam3Processor.from_pretrained(folder, local_files_only=True)
    images = list(((frames + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy())  # B x (H, W, 3)
    with torch.no_grad():
        out = model(**processor(images=images, text=[prompt] * b, return_tensors="pt"))
    scores = out.pred_logits.sigmoid() * out.presence_logits.sigmoid()  # (B, Q)
    masks = F.interpolate(out.pred_masks.sigmoid(), size=(h, w), mode="bilinear", align_corners=False) > 0.5
    return (masks & (scores > 0.5)[:, :, None, None]).any(dim=1)  # (B, H, W)


def test_sam3_mode_segments_with_a_saved_sam3_as_a_user_would(tiny_sam3):
    cfg = load_config("demo", ["--sample.mask_mode=sam3", f"--sample.sam3_path={tiny_sam3}",
                               "--data.sim_background=30,40,50"])
    masker = FirstFrameMasker.from_config(cfg)
    assert isinstance(masker.segmenter, Sam3Segmenter)
    saved = load_file(str(tiny_sam3 / "model.safetensors"))
    loaded = masker.segmenter.model.state_dict()
    assert saved.keys() <= loaded.keys() and all(torch.equal(loaded[k], v) for k, v in saved.items())

    batch = _batch(b=3, h=24, w=40, seed=1)
    frame = batch.first_frame  # (B, 3, H, W)
    masked, mask = masker(batch)
    want = reference_sam3_mask(tiny_sam3, frame)
    assert mask.dtype == torch.bool and mask.shape == (3, 24, 40)
    assert torch.equal(mask, want)
    assert 0 < want.float().mean() < 1  # some queries kept, some dropped; arm and background pixels both present
    assert torch.equal(masked, compose_masked_frame(frame, want, (30, 40, 50)))


@pytest.mark.slow
def test_generate_with_sam3_masking_shows_the_sam3_masked_first_frame(tiny_sam3, tmp_path):
    """`simforcing generate --sample.mask_mode=sam3`: the sampler starts from the SAM3-masked frame, and the PNG's first
    row (masked first frame, lossless) is the real first frame outside SAM3's mask filled with the background."""
    import imageio.v3 as iio

    from simforcing.cli import main
    from simforcing.runs.loaded import collate_one, eval_dataset
    from test_sample import make_data, make_run

    data = make_data(tmp_path / "data", num_val=1)
    cfg = make_run(tmp_path / "run", data, tmp_path / "vae")
    rc = main(["generate", "--ckpt", str(tmp_path / "run"), "--data", str(data), "--out", str(tmp_path / "gen"),
               "--num-samples", "1", "--device", "cpu", "--upscale", "1", "--sample.mask_mode=sam3",
               f"--sample.sam3_path={tiny_sam3}", "--data.sim_background=255,0,255"])
    assert rc == 0
    frame = collate_one(eval_dataset(cfg, data, "val", None)[0])["real"][:, :, 0]  # (1, 3, 32, 48)
    want = reference_sam3_mask(tiny_sam3, frame)
    assert 0 < want.float().mean() < 1
    expected = ((compose_masked_frame(frame, want, (255, 0, 255))[0] + 1) * 127.5).round().to(torch.uint8)
    png = iio.imread(tmp_path / "gen" / "sample_000.png")
    panel = torch.from_numpy(png[:32, 70:70 + 48]).permute(2, 0, 1)  # (3, 32, 48): row 0, after the 70-px labels
    assert torch.equal(panel, expected)
