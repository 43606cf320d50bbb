"""The OCR pipeline's numpy geometry: DB post-processing (probability map -> text boxes),
cropping a box out of the page, and CTC greedy decoding.

DB post-processing as PP-OCR does it, with our own pieces where it uses OpenCV and
pyclipper: the map is thresholded (and dilated by a 2 x 2 square), its 8-connected
components labelled from row runs with a union-find, each component's minimum-area rectangle
found over the convex hull of its runs' end pixels (the hull OpenCV's contour would give),
scored by the mean probability inside that rectangle, and grown by DB's "unclip" distance
``d = area * ratio / perimeter``. PP-OCR offsets the rectangle's polygon by ``d`` with
pyclipper (round joins) and takes the minimum-area rectangle of the result; for a rectangle
that is exactly the rectangle with each side moved out by ``d``, which is what
:func:`unclip` computes, so no approximation is made there. What differs: a component's
outline is its hull (PP-OCR's contour follows concavities, but the minimum-area rectangle
of a shape is that of its hull), and polygons (``det_box_type="poly"``) are not produced.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# PP-OCR's defaults (its DBPostProcess): pixel threshold, box score threshold, growth ratio,
# the shortest side a box may have before and after growing, and the most boxes a page gives.
THRESH = 0.3
BOX_THRESH = 0.5
UNCLIP_RATIO = 1.6
MIN_SIDE = 3
MAX_CANDIDATES = 1000


@dataclass
class Box:
    """A text box on the page.

    Attributes:
        points: ``float32 [4, 2]`` corners (x, y): top-left, top-right, bottom-right,
            bottom-left.
        score: the detector's mean probability inside the box before it was grown.
    """

    points: np.ndarray
    score: float


def components(mask: np.ndarray) -> list[np.ndarray]:
    """The 8-connected components of a boolean map, each as its runs.

    Args:
        mask: ``bool [H, W]``.

    Returns:
        Per component, ``int64 [n, 3]``: row, first column, last column + 1 of each run.
    """
    h, w = mask.shape
    edges = np.diff(np.pad(mask.astype(np.int8), ((0, 0), (1, 1))), axis=1)
    rows, starts = np.nonzero(edges == 1)
    _, ends = np.nonzero(edges == -1)
    n = len(rows)
    if n == 0:
        return []
    parent = np.arange(n)

    def find(i: int) -> int:
        root = i
        while parent[root] != root:
            root = parent[root]
        while parent[i] != root:
            parent[i], i = root, parent[i]
        return root

    first = np.searchsorted(rows, np.arange(h + 1))
    for r in range(h - 1):
        a, a_end = first[r], first[r + 1]
        b, b_end = first[r + 1], first[r + 2]
        # Two runs in adjacent rows touch (diagonals included) when their column spans,
        # each widened by one, overlap; both rows are sorted by column, so one merge pass.
        while a < a_end and b < b_end:
            if starts[a] <= ends[b] and starts[b] <= ends[a]:
                ra, rb = find(a), find(b)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
            if ends[a] < ends[b]:
                a += 1
            else:
                b += 1
    roots = np.array([find(i) for i in range(n)])
    order = np.argsort(roots, kind="stable")
    runs = np.stack([rows, starts, ends], axis=1)[order]
    cuts = np.nonzero(np.diff(roots[order]))[0] + 1
    return np.split(runs, cuts)


def convex_hull(points: np.ndarray) -> np.ndarray:
    """The convex hull (Andrew's monotone chain), counter-clockwise, of ``[n, 2]`` points."""
    pts = np.unique(points, axis=0)
    if len(pts) < 3:
        return pts.astype(np.float64)

    def half(seq: np.ndarray) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        for p in seq:
            while len(out) >= 2:
                o, a = out[-2], out[-1]
                if (a[0] - o[0]) * (p[1] - o[1]) - (a[1] - o[1]) * (p[0] - o[0]) > 0:
                    break
                out.pop()
            out.append(p)
        return out

    lower, upper = half(pts), half(pts[::-1])
    return np.array(lower[:-1] + upper[:-1], dtype=np.float64)


def min_area_rect(points: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The minimum-area rectangle around ``[n, 2]`` points (x, y).

    Returns:
        The corners ordered as :class:`Box` says, and the lengths of its two sides.
    """
    hull = convex_hull(points)
    if len(hull) < 3:
        lo, hi = hull.min(0), hull.max(0)
        corners = np.array([lo, [hi[0], lo[1]], hi, [lo[0], hi[1]]])
        return corners, float(hi[0] - lo[0]), float(hi[1] - lo[1])
    edges = np.roll(hull, -1, axis=0) - hull
    angles = np.unique(np.mod(np.arctan2(edges[:, 1], edges[:, 0]), np.pi / 2))
    cos, sin = np.cos(angles), np.sin(angles)
    # Coordinates along each candidate's axes: u along the edge, v across it.
    u = hull[:, 0, None] * cos + hull[:, 1, None] * sin
    v = -hull[:, 0, None] * sin + hull[:, 1, None] * cos
    areas = (u.max(0) - u.min(0)) * (v.max(0) - v.min(0))
    k = int(np.argmin(areas))
    c, s = cos[k], sin[k]
    u0, u1, v0, v1 = u[:, k].min(), u[:, k].max(), v[:, k].min(), v[:, k].max()
    corners = np.array([[uu * c - vv * s, uu * s + vv * c]
                        for uu, vv in ((u0, v0), (u1, v0), (u1, v1), (u0, v1))])
    return order_corners(corners), float(u1 - u0), float(v1 - v0)


def order_corners(corners: np.ndarray) -> np.ndarray:
    """Four corners of a rectangle as top-left, top-right, bottom-right, bottom-left."""
    by_x = corners[np.argsort(corners[:, 0], kind="stable")]
    left, right = by_x[:2], by_x[2:]
    tl, bl = left[np.argsort(left[:, 1], kind="stable")]
    tr, br = right[np.argsort(right[:, 1], kind="stable")]
    return np.array([tl, tr, br, bl], dtype=np.float64)


def unclip(corners: np.ndarray, ratio: float = UNCLIP_RATIO) -> np.ndarray:
    """Grow an ordered rectangle by DB's distance ``area * ratio / perimeter`` on each side
    (exactly what PP-OCR's pyclipper offset gives for a rectangle; see the module docs)."""
    w = np.linalg.norm(corners[1] - corners[0])
    h = np.linalg.norm(corners[3] - corners[0])
    if w == 0 or h == 0:
        return corners.copy()
    d = w * h * ratio / (2 * (w + h))
    ux, uy = (corners[1] - corners[0]) / w, (corners[3] - corners[0]) / h
    signs = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=np.float64)
    return corners + d * (signs[:, :1] * ux + signs[:, 1:] * uy)


def box_score(prob: np.ndarray, corners: np.ndarray) -> float:
    """The mean of ``prob`` over the pixels whose centres lie in the rectangle."""
    h, w = prob.shape
    x0, y0 = np.clip(np.floor(corners.min(0)).astype(int), 0, [w - 1, h - 1])
    x1, y1 = np.clip(np.ceil(corners.max(0)).astype(int), 0, [w - 1, h - 1])
    ys, xs = np.mgrid[y0:y1 + 1, x0:x1 + 1]
    inside = np.ones(ys.shape, dtype=bool)
    for a, b in ((0, 1), (1, 2), (2, 3), (3, 0)):
        ex, ey = corners[b] - corners[a]
        # Pixels on the rectangle's inner side of each edge (clockwise on screen), with
        # half a pixel of slack so a 1-pixel-thin rectangle still holds its own row.
        cross = ex * (ys - corners[a][1]) - ey * (xs - corners[a][0])
        inside &= cross >= -0.5 * np.hypot(ex, ey)
    if not inside.any():
        return 0.0
    return float(prob[y0:y1 + 1, x0:x1 + 1][inside].mean())


def boxes_from_map(prob: np.ndarray, scale: tuple[float, float], image_size: tuple[int, int],
                   thresh: float = THRESH, box_thresh: float = BOX_THRESH,
                   unclip_ratio: float = UNCLIP_RATIO, dilate: bool = True) -> list[Box]:
    """DB post-processing: a probability map to boxes on the page, in reading order.

    Args:
        prob: ``[H, W]`` text probability (the detector's output for one image).
        scale: (sy, sx), map pixels per page pixel.
        image_size: the page's (height, width), where boxes are clipped.
        thresh: the pixel threshold; box_thresh: the least box score kept;
        unclip_ratio: DB's growth ratio; dilate: widen the mask by a 2 x 2 square first.

    Returns:
        The boxes, top to bottom, left to right within a line.
    """
    mask = prob > thresh
    if dilate:
        grown = mask.copy()
        grown[1:, :] |= mask[:-1, :]
        grown[:, 1:] |= mask[:, :-1]
        grown[1:, 1:] |= mask[:-1, :-1]
        mask = grown
    found: list[Box] = []
    page_h, page_w = image_size
    for runs in components(mask)[:MAX_CANDIDATES]:
        ends = np.concatenate([np.stack([runs[:, 1], runs[:, 0]], 1),
                               np.stack([runs[:, 2] - 1, runs[:, 0]], 1)]).astype(np.float64)
        corners, w, h = min_area_rect(ends)
        if min(w, h) < MIN_SIDE:
            continue
        score = box_score(prob, corners)
        if score < box_thresh:
            continue
        grown_box = unclip(corners, unclip_ratio)
        if min(np.linalg.norm(grown_box[1] - grown_box[0]),
               np.linalg.norm(grown_box[3] - grown_box[0])) < MIN_SIDE + 2:
            continue
        on_page = grown_box / np.array([scale[1], scale[0]])
        on_page[:, 0] = np.clip(np.round(on_page[:, 0]), 0, page_w)
        on_page[:, 1] = np.clip(np.round(on_page[:, 1]), 0, page_h)
        if (np.linalg.norm(on_page[1] - on_page[0]) <= MIN_SIDE
                or np.linalg.norm(on_page[3] - on_page[0]) <= MIN_SIDE):
            continue
        found.append(Box(on_page.astype(np.float32), score))
    return reading_order(found)


def reading_order(boxes: list[Box], line_tolerance: float = 10.0) -> list[Box]:
    """Boxes sorted top to bottom; boxes whose tops are within ``line_tolerance`` pixels of
    the line's first box are one line, read left to right."""
    rest = sorted(boxes, key=lambda b: (float(b.points[0, 1]), float(b.points[0, 0])))
    out: list[Box] = []
    while rest:
        top = float(rest[0].points[0, 1])
        line = [b for b in rest if float(b.points[0, 1]) - top < line_tolerance]
        rest = [b for b in rest if float(b.points[0, 1]) - top >= line_tolerance]
        out.extend(sorted(line, key=lambda b: float(b.points[0, 0])))
    return out


def crop(image: np.ndarray, corners: np.ndarray) -> np.ndarray:
    """The box cut out of the page, upright (bilinear sampling along the box's sides); a
    box at least 1.5 times taller than wide is turned a quarter to lie along its text.

    Args:
        image: ``[H, W, C]``.
        corners: as :class:`Box`.

    Returns:
        ``float32 [h, w, C]``.
    """
    tl, tr, _, bl = corners.astype(np.float64)
    width = max(1, int(round(max(np.linalg.norm(tr - tl), np.linalg.norm(corners[2] - bl)))))
    height = max(1, int(round(max(np.linalg.norm(bl - tl), np.linalg.norm(corners[2] - tr)))))
    u = (np.arange(width) + 0.5) / width
    v = (np.arange(height) + 0.5) / height
    pts = tl + u[None, :, None] * (tr - tl) + v[:, None, None] * (bl - tl) - 0.5
    h, w = image.shape[:2]
    x = np.clip(pts[..., 0], 0, w - 1)
    y = np.clip(pts[..., 1], 0, h - 1)
    x0, y0 = np.floor(x).astype(np.int64), np.floor(y).astype(np.int64)
    x1, y1 = np.minimum(x0 + 1, w - 1), np.minimum(y0 + 1, h - 1)
    fx, fy = (x - x0)[..., None], (y - y0)[..., None]
    src = image.astype(np.float32, copy=False)
    out = ((src[y0, x0] * (1 - fx) + src[y0, x1] * fx) * (1 - fy)
           + (src[y1, x0] * (1 - fx) + src[y1, x1] * fx) * fy)
    if height >= 1.5 * width:
        out = np.rot90(out)
    return np.ascontiguousarray(out, dtype=np.float32)


def ctc_greedy(probs: np.ndarray, alphabet: list[str]) -> list[tuple[str, float]]:
    """CTC greedy decoding: the best class per step, repeats merged, blanks (class 0)
    dropped.

    Args:
        probs: ``[N, T, C]`` per-step class probabilities.
        alphabet: class index -> text (index 0, the blank, is never read).

    Returns:
        Per row: the text and the mean probability of its kept steps (0 for no text).
    """
    best = probs.argmax(axis=2)
    conf = probs.max(axis=2)
    out = []
    for ids, p in zip(best, conf, strict=True):
        keep = ids != 0
        keep[1:] &= ids[1:] != ids[:-1]
        text = "".join(alphabet[i] for i in ids[keep])
        out.append((text, float(p[keep].mean()) if keep.any() else 0.0))
    return out
