"""Viewing samples: side-by-side captioned panels as MP4 (PyAV), GIF (imageio) and a PNG frame strip.

Videos are float (3, F, H, W) in [-1, 1]; tiny frames are upscaled with nearest neighbour (``upscale``) for viewing.
Captions are drawn with Pillow's built-in font (Pillow comes with matplotlib and imageio).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import imageio.v3 as iio
import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from simforcing.data.format import write_video
from simforcing.data.paired import to_uint8
from simforcing.utils import atomic_write

CAPTION_H = 14
PAD = 2
BLANK = 40  # grey level of a panel that has no content


def to_uint8_frames(video: torch.Tensor, upscale: int = 1) -> np.ndarray:
    """(3, F, H, W) in [-1, 1] -> uint8 (F, H·k, W·k, 3), nearest-neighbour upscaled by k = ``upscale``."""
    if video.ndim != 4 or video.shape[0] != 3:
        raise ValueError(f"video must be (3, F, H, W), got {tuple(video.shape)}")
    x = to_uint8(video).permute(1, 2, 3, 0).numpy()  # (F, H, W, 3)
    if upscale > 1:
        x = x.repeat(upscale, axis=1).repeat(upscale, axis=2)
    return np.ascontiguousarray(x)


def frames_to_uint8(frames: torch.Tensor) -> np.ndarray:
    """(B, 3, H, W) in [-1, 1] -> uint8 (B, H, W, 3)."""
    return to_uint8(frames).permute(0, 2, 3, 1).numpy()


def _text(img: np.ndarray, xy: tuple[int, int], text: str, fill=(255, 255, 255)) -> np.ndarray:
    pil = Image.fromarray(img)
    ImageDraw.Draw(pil).text(xy, text, fill=fill, font=ImageFont.load_default())
    return np.array(pil)  # writable copy


def blank_panel(num_frames: int, h: int, w: int, label: str) -> np.ndarray:
    """uint8 (F, h, w, 3) grey frames with ``label`` written in the middle (a panel that was not computed)."""
    frame = np.full((h, w, 3), BLANK, np.uint8)
    frame = _text(frame, (4, max(0, h // 2 - 6)), label, fill=(220, 220, 220))
    return np.repeat(frame[None], num_frames, axis=0)


def side_by_side(panels: Sequence[np.ndarray], captions: Sequence[str], title: str = "") -> np.ndarray:
    """Panels uint8 (F, h, w, 3) each -> uint8 (F, H', W', 3) with a caption above each and a title row; H', W' even."""
    f, h, w, _ = panels[0].shape
    for p in panels:
        if p.shape != panels[0].shape:
            raise ValueError(f"panels must share (F, h, w, 3) = {panels[0].shape}, got {p.shape}")
    top = CAPTION_H * (2 if title else 1)
    width = len(panels) * (w + PAD) - PAD
    height = top + h
    width += width % 2
    height += height % 2
    canvas = np.zeros((f, height, width, 3), np.uint8)
    header = np.zeros((top, width, 3), np.uint8)
    if title:
        header = _text(header, (2, 1), title)
    for i, (p, cap) in enumerate(zip(panels, captions)):
        x0 = i * (w + PAD)
        header = _text(header, (x0 + 2, top - CAPTION_H + 1), cap)
        canvas[:, top:top + h, x0:x0 + w] = p
    canvas[:, :top] = header
    return canvas


def frame_strip(rows: Sequence[np.ndarray], labels: Sequence[str], label_w: int = 70) -> np.ndarray:
    """Rows uint8 (F, h, w, 3) -> one image (rows × (label + F columns)): rows = panels, columns = frames."""
    f, h, w, _ = rows[0].shape
    img = np.zeros((len(rows) * (h + PAD), label_w + f * (w + PAD), 3), np.uint8)
    for r, (frames, label) in enumerate(zip(rows, labels)):
        y0 = r * (h + PAD)
        for t in range(f):
            x0 = label_w + t * (w + PAD)
            img[y0:y0 + h, x0:x0 + w] = frames[t]
        img = _text(img, (2, y0 + h // 2 - 6), label)
    return img


def write_gif(path: str | Path, frames: np.ndarray, fps: int = 4) -> None:
    atomic_write(path, lambda p: iio.imwrite(p, frames, extension=".gif", duration=1000 / fps, loop=0))


def write_png(path: str | Path, image: np.ndarray) -> None:
    atomic_write(path, lambda p: iio.imwrite(p, image, extension=".png"))


@dataclass(frozen=True)
class Clip:
    """The files of one clip: the video as ``mp4`` and ``gif``, and ``png``, a strip of its frames."""

    mp4: Path
    gif: Path
    png: Path


def write_clip(stem: str | Path, video: np.ndarray, strip: np.ndarray, fps: int) -> Clip:
    """``stem.mp4`` and ``stem.gif`` of ``video`` uint8 (F, H, W, 3), ``stem.png`` of ``strip`` uint8 (H, W, 3)."""
    stem = Path(stem)
    clip = Clip(stem.with_suffix(".mp4"), stem.with_suffix(".gif"), stem.with_suffix(".png"))
    stem.parent.mkdir(parents=True, exist_ok=True)
    write_video(clip.mp4, video, fps=fps)
    write_gif(clip.gif, video, fps=fps)
    write_png(clip.png, strip)
    return clip


def write_sample_media(stem: str | Path, masked_frame: Optional[torch.Tensor], sim_video: Optional[torch.Tensor],
                       pred_video: torch.Tensor, gt_video: torch.Tensor, title: str = "",
                       sim_label: str = "w=0: none", upscale: int = 4, fps: int = 4) -> Clip:
    """Write ``stem.mp4``, ``stem.gif`` (four panels side by side: masked first frame | simulation rollout |
    prediction | ground truth) and ``stem.png`` (rows = panels, columns = frames).

    masked_frame (3, H, W) or None; sim_video, pred_video, gt_video (3, F, H, W) in [-1, 1]; sim_video None -> a blank
    panel labelled ``sim_label``.
    """
    stem = Path(stem)
    gt = to_uint8_frames(gt_video, upscale)
    f, h, w, _ = gt.shape
    pred = to_uint8_frames(pred_video, upscale)
    sim = to_uint8_frames(sim_video, upscale) if sim_video is not None else blank_panel(f, h, w, sim_label)
    if masked_frame is not None:
        masked = np.repeat(to_uint8_frames(masked_frame[:, None], upscale), f, axis=0)
    else:
        masked = blank_panel(f, h, w, "no mask")
    panels = [masked, sim, pred, gt]
    captions = ["masked first frame", "simulation", "prediction", "ground truth"]
    video = side_by_side(panels, captions, title)
    return write_clip(stem, video, frame_strip(panels, ["masked", "sim", "pred", "truth"]), fps)
