"""Checks of what a user hands the Python API and a loaded policy, before any network runs.

    image = check_image(frame, "frame", (32, 48))        # uint8 (H, W, 3), else a ValueError saying how to convert
    state = check_vector(state, "state", 7)               # float64 (7,), finite
    acts = check_matrix(actions, "actions", 7, rows=8)    # float64 (8, 7), finite
    text = check_instruction(instruction)

Each error is a ``ValueError`` that names the argument, what it got and what it expects — and, for the common
mistakes (a float image in [0, 1], an image in (C, H, W) layout, an RGBA or grey image), the conversion that fixes it.
Never a torch shape error from deep inside, never NaN in what a network is given.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

CHANNEL_COUNTS = (1, 3, 4)  # grey, RGB, RGBA: what a last (or first) axis of an image holds
MIN_SCALE = 4  # an image smaller than 1/4 of the model's resolution would be upscaled past any detail it holds
MIN_CROP_KEPT = 0.5  # the centre crop to the model's aspect ratio must keep at least half of each side


def _range(a: np.ndarray) -> str:
    if a.size == 0:
        return "no values"
    if np.issubdtype(a.dtype, np.number) and not np.isfinite(a).all():
        return "non-finite values (NaN or inf)"
    return f"values in [{a.min():g}, {a.max():g}]"


def _layout_hint(a: np.ndarray) -> str:
    """How to turn a near-miss image into uint8 (H, W, 3), or ''."""
    if a.ndim == 3 and a.shape[0] in CHANNEL_COUNTS and a.shape[-1] not in CHANNEL_COUNTS:
        return "; it looks like (C, H, W): pass image.transpose(1, 2, 0)"
    if a.ndim == 4 and a.shape[0] == 1:
        return "; it holds a batch of one: pass image[0]"
    if a.ndim == 2 or (a.ndim == 3 and a.shape[-1] == 1):
        return "; a grey image: pass np.repeat(image.reshape(H, W, 1), 3, axis=2)"
    if a.ndim == 3 and a.shape[-1] == 4:
        return "; an RGBA image: pass image[..., :3]"
    return ""


def check_image(image, name: str, resolution: Optional[tuple[int, int]] = None) -> np.ndarray:
    """``image`` as uint8 (H, W, 3); ValueError naming ``name`` for another dtype, layout, channel count, an empty
    image, or (given the model's ``resolution`` (height, width)) one too small or of too different an aspect ratio
    for the training resize + centre crop to make a frame of it."""
    a = np.asarray(image)
    if a.ndim != 3 or a.shape[-1] != 3:
        raise ValueError(f"{name}: expected uint8 (H, W, 3); got {a.dtype} {a.shape}{_layout_hint(a)}")
    if a.dtype != np.uint8:
        fix = ("(image * 255).round().astype(np.uint8) for an image in [0, 1]"
               if np.issubdtype(a.dtype, np.floating) else "image.astype(np.uint8) for values in [0, 255]")
        raise ValueError(f"{name}: expected uint8 (H, W, 3) with values 0..255; got {a.dtype} {a.shape} with "
                         f"{_range(a)}; pass {fix}")
    h, w = a.shape[:2]
    if h == 0 or w == 0:
        raise ValueError(f"{name}: the image is empty ({a.shape}); expected uint8 (H, W, 3) with H, W >= 1")
    if resolution is not None:
        th, tw = resolution
        if h * MIN_SCALE < th or w * MIN_SCALE < tw:
            raise ValueError(f"{name}: {h}×{w} is far below the model's resolution {th}×{tw} (at least "
                             f"{-(-th // MIN_SCALE)}×{-(-tw // MIN_SCALE)} expected); pass the camera's frame, not a "
                             "thumbnail")
        kept = min((h / w) / (th / tw), (w / h) / (tw / th))
        if kept < MIN_CROP_KEPT:
            raise ValueError(f"{name}: {h}×{w} has another aspect ratio than the model's {th}×{tw}: the centre crop "
                             f"would keep {kept:.0%} of one side; expected a frame of about {th}:{tw}")
    return a


def check_vector(x, name: str, size: int) -> np.ndarray:
    """``x`` as float64 (size,), finite; ValueError naming ``name`` otherwise."""
    try:
        a = np.asarray(x, np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: expected {size} numbers; got {type(x).__name__} ({e})") from None
    if a.shape != (size,):
        raise ValueError(f"{name}: expected shape ({size},) in the dataset's units; got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name}: holds NaN or inf at {np.flatnonzero(~np.isfinite(a)).tolist()}; expected finite "
                         "values")
    return a


def check_matrix(x, name: str, width: int, rows: Optional[int] = None) -> np.ndarray:
    """``x`` as float64 (rows, width) — any number of rows (>= 1) when ``rows`` is None — finite; ValueError naming
    ``name`` otherwise."""
    try:
        a = np.asarray(x, np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: expected a ({rows or 'N'}, {width}) array; got {type(x).__name__} ({e})") from None
    if a.ndim != 2 or a.shape[1] != width or (rows is not None and len(a) != rows) or len(a) == 0:
        raise ValueError(f"{name}: expected ({rows if rows is not None else 'N >= 1'}, {width}) in the dataset's "
                         f"units; got {a.shape}")
    bad = ~np.isfinite(a)
    if bad.any():
        raise ValueError(f"{name}: holds NaN or inf ({int(bad.sum())} values, first at row "
                         f"{int(np.argwhere(bad)[0][0])}); expected finite values")
    return a


def check_instruction(instruction) -> str:
    """A non-empty string; ValueError otherwise."""
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError(f"instruction: expected a non-empty string (what the robot should do); got "
                         f"{instruction!r}")
    return instruction


def check_mask(mask, name: str, shape: tuple[int, int]) -> np.ndarray:
    """``mask`` as bool (H, W) of the frame's ``shape``; ValueError naming ``name`` otherwise (0/1 numbers allowed)."""
    a = np.asarray(mask)
    if a.shape != tuple(shape):
        raise ValueError(f"{name}: expected bool {tuple(shape)} (the frame's height and width); got {a.dtype} "
                         f"{a.shape}")
    if a.dtype != bool and not (np.issubdtype(a.dtype, np.number) and np.isin(a, (0, 1)).all()):
        raise ValueError(f"{name}: expected bool (or 0/1) values; got {a.dtype} with {_range(a)}")
    return a.astype(bool)
