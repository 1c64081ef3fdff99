"""First-frame masking: composition with the sim background, the three modes, and SAM3's errors without torchvision."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from simforcing.config import ConfigError, load_config
from simforcing.data.format import DataError
from simforcing.masking import FirstFrameMasker, Sam3Segmenter, background_pixels, compose_masked_frame


def _batch(b=2, f=3, h=8, w=12, masks=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"real": torch.rand(b, 3, f, h, w, generator=g) * 2 - 1, "sim": torch.rand(b, 3, f, h, w, generator=g) - 1,
            "arm_mask": torch.rand(b, f, h, w, generator=g) > 0.5, "has_arm_mask": torch.full((b,), masks),
            "episode_id": [f"ep{i}" for i in range(b)]}


def test_composition_keeps_the_arm_and_fills_the_background():
    batch = _batch()
    frame, mask = batch["real"][:, :, 0], batch["arm_mask"][:, 0]
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
    assert torch.equal(mask, batch["arm_mask"][:, 0])
    assert torch.equal(masked, compose_masked_frame(batch["real"][:, :, 0], batch["arm_mask"][:, 0], (0, 0, 0)))


def test_mask_file_mode_without_masks_names_the_file_and_the_alternatives():
    with pytest.raises(DataError, match="arm_mask.npz") as e:
        FirstFrameMasker("mask-file", (0, 0, 0))(_batch(masks=False))
    assert "sam3" in str(e.value) and "paired-sim" in str(e.value) and e.value.kind == "missing_arm_mask"


def test_paired_sim_mode_returns_the_sim_first_frame():
    batch = _batch()
    masked, mask = FirstFrameMasker("paired-sim", (0, 0, 0))(batch)
    assert mask is None and torch.equal(masked, batch["sim"][:, :, 0])
    with pytest.raises(DataError, match="'sim'"):
        FirstFrameMasker("paired-sim", (0, 0, 0))({"real": batch["real"]})


def test_sam3_mode_composes_the_segmenters_mask():
    batch = _batch()
    seen = []

    def fake_segmenter(frames):  # (B, 3, H, W) -> (B, H, W): "arm" = bright red channel
        seen.append(frames)
        return frames[:, 0] > 0.2

    cfg = load_config("demo", ["--sample.mask_mode=sam3", "--data.sim_background=30,40,50"])
    masker = FirstFrameMasker.from_config(cfg, segmenter=fake_segmenter)
    masked, mask = masker(batch)
    frame = batch["real"][:, :, 0]
    assert torch.equal(seen[0], frame)  # the segmenter sees the real first frame
    assert torch.equal(mask, frame[:, 0] > 0.2)
    assert torch.equal(masked, compose_masked_frame(frame, frame[:, 0] > 0.2, (30, 40, 50)))


def test_sam3_without_a_path_or_torchvision_says_what_to_do():
    with pytest.raises(ConfigError, match="sample.sam3_path"):
        Sam3Segmenter(None)
    cfg = load_config("demo", ["--sample.mask_mode=sam3"])
    with pytest.raises(ConfigError, match="sample.sam3_path"):
        FirstFrameMasker.from_config(cfg)
    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed here; the missing-extra message cannot be triggered")
    with pytest.raises(ImportError) as e:
        Sam3Segmenter("/models/sam3")
    msg = str(e.value)
    assert "torchvision" in msg and "`sam3` extra" in msg and "sample.sam3_path='/models/sam3'" in msg


def test_transformers_has_sam3_with_the_post_processing_we_call():
    from transformers import Sam3Model, Sam3Processor

    assert hasattr(Sam3Model, "from_pretrained")
    assert hasattr(Sam3Processor, "post_process_instance_segmentation")


def test_unknown_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="sample.mask_mode"):
        FirstFrameMasker("box", (0, 0, 0))
