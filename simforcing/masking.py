"""First-frame masking (SPEC §5 step 1): turn the real first frame into a simulation-style first frame x^s_0.

The simulation videos show the robot arm alone on a flat background. At inference the real first frame is made to look
like that: keep the arm pixels, fill everything else with the simulation background
(``cfg.data.sim_background``; when it is None, the dataset's ``sim_background`` from info.json, which
``simforcing.runs.loaded.with_dataset_settings`` fills in; black when neither says). The result is VAE-encoded (F = 1)
to z^s_0, the start of the simulation rollout. Three modes, ``cfg.sample.mask_mode``:

| mode         | arm mask comes from                                                   |
|--------------|-----------------------------------------------------------------------|
| `mask-file`  | the dataset's stored real-frame arm masks (`arm_mask.npz`; the synthetic benchmark's exact masks) |
| `sam3`       | SAM3 (transformers `Sam3Model` from the local folder `sample.sam3_path`) prompted with "robot arm" |
| `paired-sim` | no mask: the dataset's paired *simulation* first frame is used as x^s_0, as the authors' code does |

`paired-sim` is not a masking method: it reads the simulator's own first frame, which is only available for paired data.
With a full-scene pairing (``data.pairing = scene``, ``data synth --pairing scene``: the simulation videos show the
whole scene, not the arm alone) it is the only mode whose frame is a simulation frame; the others are refused by name
where a sampler would mask (:func:`check_first_frame_domain`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable, Optional

import torch

from simforcing.config import Config, ConfigError, parse_color
from simforcing.data.format import DataError
from simforcing.data.paired import compose_views, split_views, to_unit_range
from simforcing.media import frames_to_uint8
from simforcing.sampler_batch import SamplerBatch

MASK_MODES = ("mask-file", "sam3", "paired-sim")

# frames (B, 3, H, W) in [-1, 1] -> arm masks (B, H, W) bool
Segmenter = Callable[[torch.Tensor], torch.Tensor]


def background_pixels(rgb: tuple[int, int, int], device=None, dtype=torch.float32) -> torch.Tensor:
    """An 'R,G,B' colour in 0..255 as a (1, 3, 1, 1) tensor in [-1, 1]."""
    return to_unit_range(torch.tensor(rgb, device=device)).to(dtype).view(1, 3, 1, 1)


def compose_masked_frame(frame: torch.Tensor, mask: torch.Tensor, rgb: tuple[int, int, int]) -> torch.Tensor:
    """Keep the arm, fill the rest with the simulation background.

    frame (B, 3, H, W) in [-1, 1]; mask (B, H, W) bool (True = arm) -> (B, 3, H, W).
    """
    if frame.ndim != 4 or frame.shape[1] != 3:
        raise ValueError(f"frame must be (B, 3, H, W), got {tuple(frame.shape)}")
    b, _, h, w = frame.shape
    if tuple(mask.shape) != (b, h, w):
        raise ValueError(f"arm mask must be (B, H, W) = {(b, h, w)} to match the frame, got {tuple(mask.shape)}")
    bg = background_pixels(rgb, frame.device, frame.dtype)
    return torch.where(mask.to(frame.device, torch.bool)[:, None], frame, bg)


class Sam3Segmenter:
    """SAM3 arm segmentation with a text prompt (transformers' `Sam3Model` + `Sam3Processor`, local weights only).

    ``__call__(frames (B, 3, H, W) in [-1, 1]) -> (B, H, W) bool``: the union of all instances SAM3 finds for the
    prompt with score > ``score_threshold`` (mask probabilities binarised at ``mask_threshold``), at frame size.
    SAM3 needs torchvision (the ``sam3`` extra, which ``make install`` includes; beside the CPU wheel of torch its
    nms and roi_align come from ``simforcing.torchvision_ops``).
    """

    def __init__(self, path: Optional[str], device: str | torch.device = "cpu", prompt: str = "robot arm",
                 score_threshold: float = 0.5, mask_threshold: float = 0.5):
        if not path:
            raise ConfigError("sample.sam3_path: got None; sample.mask_mode='sam3' needs a local folder with the "
                              "SAM3 weights and processor (transformers layout), e.g. --sample.sam3_path=/models/sam3")
        if importlib.util.find_spec("torchvision") is None:
            raise ImportError(
                "sample.mask_mode='sam3' needs torchvision (SAM3's image processor and box ops use it), which is not "
                "installed; install the `sam3` extra (pip install -e '.[sam3]' with the torchvision built for your "
                "torch; `make install` does it), or choose --sample.mask_mode=mask-file / paired-sim. Weights are "
                f"read from sample.sam3_path={path!r}.")
        from transformers import Sam3Model, Sam3Processor  # the sam3 extra (torchvision), checked just above

        if not (Path(path) / "config.json").is_file():  # else transformers would read the path as a hub repo id
            raise ConfigError(f"sample.sam3_path: {path!r} has no config.json; expected a local folder with the SAM3 "
                              "weights and processor files in transformers' layout (save_pretrained)")
        try:
            self.processor = Sam3Processor.from_pretrained(path, local_files_only=True)
            self.model = Sam3Model.from_pretrained(path, local_files_only=True, use_safetensors=True).to(device).eval()
        except OSError as e:
            raise ConfigError(f"sample.sam3_path: cannot load SAM3 from {path!r} ({e}); expected a local folder "
                              "with config.json, weights and processor files") from e
        self.device = torch.device(device)
        self.prompt, self.score_threshold, self.mask_threshold = prompt, score_threshold, mask_threshold

    @torch.no_grad()
    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        b, _, h, w = frames.shape
        images = [f for f in frames_to_uint8(frames)]  # B × (H, W, 3) uint8
        inputs = self.processor(images=images, text=[self.prompt] * b, return_tensors="pt").to(self.device)
        outputs = self.model(**inputs)
        results = self.processor.post_process_instance_segmentation(
            outputs, threshold=self.score_threshold, mask_threshold=self.mask_threshold, target_sizes=[(h, w)] * b)
        masks = torch.zeros(b, h, w, dtype=torch.bool)
        for i, r in enumerate(results):
            if len(r["masks"]):
                masks[i] = r["masks"].bool().any(dim=0).cpu()  # union of instances, (H, W)
        return masks.to(frames.device)


def check_first_frame_domain(cfg: Config) -> None:
    """ConfigError when the student's simulation chain (``sample.condition = rollout``) would start from a frame unlike
    the data's simulation videos: with the full-scene pairing (``data.pairing = scene``: the simulator renders the
    whole scene, objects included, in its own plain look) the real first frame masked to its arm (``mask-file``,
    ``sam3``: the arm on the background, the paper's Bridge-like x^s_0) is not one; ``paired-sim`` (the simulator's
    own first frame) is, and the twin (``render``) and the recorded video (``oracle``) need no masked frame."""
    s = cfg.sample
    if cfg.data.pairing == "scene" and s.condition == "rollout" and s.mask_mode != "paired-sim":
        raise ConfigError(f"sample.mask_mode={s.mask_mode}: the data is a full-scene pairing (data.pairing scene, "
                          "meta/info.json): its simulation videos show the whole scene as the simulator sees it, so "
                          "the real first frame masked to the arm is no simulation first frame; use "
                          "--sample.mask_mode=paired-sim (the simulator's own first frame) or "
                          "--sample.condition=render (the twin renders it)")


class FirstFrameMasker:
    """Builds x^s_0 (B, 3, H, W) from a batch of windows, by ``mode`` (see the module docstring).

    ``__call__(batch: SamplerBatch) -> (masked_frame (B, 3, H, W), arm_mask (B, H, W) bool or None)``: the batch's
    ``first_frame``, and its ``arm_mask`` for `mask-file`, ``recorded_sim`` for `paired-sim`.
    """

    def __init__(self, mode: str, background: tuple[int, int, int], segmenter: Optional[Segmenter] = None,
                 views: int = 1, layout: str = "width"):
        if mode not in MASK_MODES:
            raise ConfigError(f"sample.mask_mode: got {mode!r}; expected one of {', '.join(MASK_MODES)}")
        self.mode, self.background, self.segmenter = mode, background, segmenter
        self.views, self.layout = views, layout  # a multi-view frame: SAM3 segments each camera's image alone

    @classmethod
    def from_config(cls, cfg: Config, device: str | torch.device = "cpu",
                    segmenter: Optional[Segmenter] = None) -> "FirstFrameMasker":
        """The SAM3 model is loaded here (once) unless a ``segmenter`` is given (:func:`check_first_frame_domain`
        first)."""
        check_first_frame_domain(cfg)
        mode = cfg.sample.mask_mode
        if mode == "sam3" and segmenter is None:
            segmenter = Sam3Segmenter(cfg.sample.sam3_path, device)
        return cls(mode, parse_color(cfg.data.sim_background or "black", "data.sim_background"), segmenter,
                   cfg.data.num_views, cfg.data.view_layout)

    def __call__(self, batch: SamplerBatch) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        if self.mode == "paired-sim":
            if batch.recorded_sim is None:
                raise DataError("sample.mask_mode='paired-sim' needs the paired sim video of the window in the batch "
                                "(SamplerBatch.recorded_sim); load the dataset with domains ('sim', 'real')",
                                kind="missing_sim")
            return batch.recorded_sim[:, :, 0], None
        frame = batch.first_frame  # (B, 3, H, W)
        if self.mode == "mask-file":
            if batch.arm_mask is None:
                eps = batch.episode_ids or "?"
                raise DataError(f"sample.mask_mode='mask-file' needs stored arm masks (episodes/<id>/arm_mask.npz), "
                                f"but episode(s) {eps} have none; use --sample.mask_mode=sam3 or paired-sim",
                                kind="missing_arm_mask")
            mask = batch.arm_mask.bool()  # (B, H, W): the first frame's mask
        else:
            if self.segmenter is None:
                raise ConfigError("sample.mask_mode='sam3' needs a segmenter (set sample.sam3_path)")
            parts = split_views(frame, self.views, self.layout)  # (B, 3, H, W) each: one camera's image
            mask = compose_views([self.segmenter(p).bool() for p in parts], self.layout)
        return compose_masked_frame(frame, mask, self.background), mask
