"""Images for the vision models: decoding (Pillow, the ``vision`` extra), the checks every
input passes, and the numpy resampling the pipelines share.

An image here is a ``uint8`` array ``[H, W, 3]`` in RGB order. Decoding is Pillow's; nothing
else in the pipelines needs it, so arrays work without the extra.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError

# Pixels one image may have: 64 megapixels is an 8000 x 8000 page. Pillow's own guard
# (Image.MAX_IMAGE_PIXELS, about 89 M) only warns below twice its value; this one refuses.
MAX_PIXELS = 64_000_000


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise VkumdValueError("reading image files needs Pillow: pip install vkumd[vision] "
                              "(or pip install pillow); numpy arrays [H, W, 3] of uint8 work "
                              "without it") from None
    return Image


def load_image(path: str | Path) -> np.ndarray:
    """Decode an image file to RGB.

    Args:
        path: a file Pillow can read (PNG, JPEG, BMP, TIFF, WebP, ...).

    Returns:
        ``uint8 [H, W, 3]``.

    Raises:
        VkumdValueError: Pillow is missing, the file is missing or not an image, or the
            image is empty or larger than :data:`MAX_PIXELS`.
    """
    image_mod = _pillow()
    path = Path(path)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "no such file"
        raise VkumdValueError(f"image {path}: {what}; give an image file")
    try:
        with image_mod.open(path) as img:
            pixels = img.width * img.height
            if pixels > MAX_PIXELS:
                raise VkumdValueError(f"image {path}: {img.width} x {img.height} is "
                                      f"{pixels} pixels, more than the limit of {MAX_PIXELS}; "
                                      "scale it down first")
            img.load()
            if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and
                                                     "transparency" in img.info):
                # Transparent pixels read as white paper, not as whatever colour they hold.
                rgba = img.convert("RGBA")
                background = image_mod.new("RGBA", rgba.size, (255, 255, 255, 255))
                rgb = image_mod.alpha_composite(background, rgba).convert("RGB")
            else:
                rgb = img.convert("RGB")
            array = np.asarray(rgb, dtype=np.uint8)
    except VkumdValueError:
        raise
    except image_mod.DecompressionBombError as exc:
        raise VkumdValueError(f"image {path}: {exc}; scale it down first") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise VkumdValueError(f"image {path}: not an image Pillow can read ({exc})") from None
    return check_image(array, str(path))


def check_image(image: Any, what: str = "image") -> np.ndarray:
    """``image`` as ``uint8 [H, W, 3]`` RGB, checked.

    Args:
        image: ``uint8`` ``[H, W, 3]``, ``[H, W, 4]`` (alpha dropped) or ``[H, W]`` (gray).
        what: how errors name it.

    Raises:
        VkumdTypeError: not a numpy array of uint8.
        VkumdValueError: another rank or channel count, no pixels, or more than
            :data:`MAX_PIXELS`.
    """
    if not isinstance(image, np.ndarray):
        raise VkumdTypeError(f"{what}: a {type(image).__name__}; give a numpy uint8 array "
                             "[H, W, 3] (RGB) or a file path")
    if image.dtype != np.uint8:
        raise VkumdTypeError(f"{what}: dtype {image.dtype}; give uint8 pixels 0..255 "
                             "(convert with np.clip(a, 0, 255).astype(np.uint8))")
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    if image.ndim != 3 or image.shape[2] not in (3, 4):
        raise VkumdValueError(f"{what}: shape {image.shape}; give [H, W, 3] RGB, [H, W, 4] "
                              "RGBA or [H, W] gray")
    h, w = image.shape[:2]
    if h == 0 or w == 0:
        raise VkumdValueError(f"{what}: {w} x {h} has no pixels; give a non-empty image")
    if h * w > MAX_PIXELS:
        raise VkumdValueError(f"{what}: {w} x {h} is {h * w} pixels, more than the limit of "
                              f"{MAX_PIXELS}; scale it down first")
    return np.ascontiguousarray(image[:, :, :3])


def resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resampling with pixel centres aligned (``align_corners=False``), float32.

    Downscaling by more than 2 first averages whole blocks, so thin strokes are not skipped
    between sample points.

    Args:
        image: ``[H, W, C]`` of any numeric dtype.
        height, width: the size wanted (>= 1).

    Returns:
        ``float32 [height, width, C]``.
    """
    src = image.astype(np.float32, copy=False)
    factor = min(src.shape[0] // height, src.shape[1] // width)
    if factor >= 2:
        h, w = src.shape[0] // factor * factor, src.shape[1] // factor * factor
        src = src[:h, :w].reshape(h // factor, factor, w // factor, factor, -1).mean((1, 3))
    rows = _taps(src.shape[0], height)
    cols = _taps(src.shape[1], width)
    top = src[rows[0]] * (1 - rows[2])[:, None, None] + src[rows[1]] * rows[2][:, None, None]
    return (top[:, cols[0]] * (1 - cols[2])[None, :, None]
            + top[:, cols[1]] * cols[2][None, :, None]).astype(np.float32, copy=False)


def _taps(size: int, out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each output index: the two source indices and the weight of the second."""
    centre = (np.arange(out, dtype=np.float64) + 0.5) * (size / out) - 0.5
    centre = np.clip(centre, 0, size - 1)
    low = np.floor(centre).astype(np.int64)
    high = np.minimum(low + 1, size - 1)
    return low, high, (centre - low).astype(np.float32)


def scaled_size(height: int, width: int, max_side: int, min_side: int, multiple: int
                ) -> tuple[int, int]:
    """The size an image is resized to before padding: the longer side at most
    ``max_side`` and the shorter at least ``min_side`` (the longer limit wins), aspect kept,
    each side at least ``multiple``."""
    scale = 1.0
    if min(height, width) < min_side:
        scale = min_side / min(height, width)
    if max(height, width) * scale > max_side:
        scale = max_side / max(height, width)
    return (max(multiple, round(height * scale)), max(multiple, round(width * scale)))


def padded(size: int, multiple: int) -> int:
    """``size`` rounded up to a multiple of ``multiple``."""
    return int(math.ceil(size / multiple) * multiple)
