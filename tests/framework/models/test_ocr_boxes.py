"""The OCR pipeline's numpy geometry, with no model and no device: connected components
against a flood fill, minimum-area rectangles of known rotated rectangles, DB's unclip
distance, box scores, cropping, CTC decoding, resampling and the image checks."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.models import ocr_boxes
from vkumd.framework.models.vision_image import MAX_PIXELS, check_image, resize, scaled_size


def _flood_labels(mask: np.ndarray) -> list[set[tuple[int, int]]]:
    """8-connected components by breadth-first flood fill (the reference)."""
    seen = np.zeros_like(mask, dtype=bool)
    out = []
    h, w = mask.shape
    for r0, c0 in zip(*np.nonzero(mask), strict=True):
        if seen[r0, c0]:
            continue
        comp, queue = set(), deque([(r0, c0)])
        seen[r0, c0] = True
        while queue:
            r, c = queue.popleft()
            comp.add((int(r), int(c)))
            for dr in (-1, 0, 1):
                for dc in (-1, 0, 1):
                    rr, cc = r + dr, c + dc
                    if 0 <= rr < h and 0 <= cc < w and mask[rr, cc] and not seen[rr, cc]:
                        seen[rr, cc] = True
                        queue.append((rr, cc))
        out.append(comp)
    return out


@pytest.mark.parametrize("density", [0.2, 0.45, 0.6])
def test_components_match_a_flood_fill(density):
    rng = np.random.default_rng()
    mask = rng.random((37, 53)) < density
    got = []
    for runs in ocr_boxes.components(mask):
        got.append({(int(r), c) for r, s, e in runs for c in range(s, e)})
    want = _flood_labels(mask)
    assert sorted(map(sorted, got)) == sorted(map(sorted, want))
    assert ocr_boxes.components(np.zeros((5, 7), bool)) == []


@pytest.mark.parametrize("angle", [0.0, 7.0, -12.5, 33.0, 90.0])
def test_min_area_rect_finds_a_rotated_rectangle(angle):
    rng = np.random.default_rng()
    w, h = 41.0, 13.0
    t = np.deg2rad(angle)
    axis_u, axis_v = np.array([np.cos(t), np.sin(t)]), np.array([-np.sin(t), np.cos(t)])
    inner = rng.random((200, 2)) * [w, h]
    outline = np.array([[0, 0], [w, 0], [w, h], [0, h]])
    pts = np.concatenate([inner, outline]) @ np.stack([axis_u, axis_v]) + [100, 80]
    corners, side_a, side_b = ocr_boxes.min_area_rect(pts)
    assert sorted([side_a, side_b]) == pytest.approx([h, w], rel=1e-9)
    want = ocr_boxes.order_corners(outline @ np.stack([axis_u, axis_v]) + [100, 80])
    np.testing.assert_allclose(corners, want, atol=1e-7)


def test_unclip_moves_every_side_out_by_dbs_distance():
    corners = np.array([[10.0, 20.0], [50.0, 20.0], [50.0, 30.0], [10.0, 30.0]])
    grown = ocr_boxes.unclip(corners, ratio=1.6)
    d = 40 * 10 * 1.6 / (2 * (40 + 10))
    np.testing.assert_allclose(grown, [[10 - d, 20 - d], [50 + d, 20 - d], [50 + d, 30 + d],
                                       [10 - d, 30 + d]])
    # Rotated: the same distance, measured along the rectangle's own axes.
    t = np.deg2rad(20)
    rot = np.array([[np.cos(t), np.sin(t)], [-np.sin(t), np.cos(t)]])
    turned = ocr_boxes.unclip(corners @ rot, ratio=1.6)
    np.testing.assert_allclose(turned, grown @ rot, atol=1e-9)


def test_boxes_from_map_finds_two_lines_in_reading_order():
    prob = np.zeros((96, 200), np.float32)
    prob[60:70, 20:150] = 0.9   # the second line, drawn first
    prob[20:32, 30:180] = 0.8
    prob[80:81, 10:12] = 0.95   # a speck: shorter than the least side
    boxes = ocr_boxes.boxes_from_map(prob, scale=(0.5, 0.5), image_size=(192, 400))
    assert len(boxes) == 2
    first, second = boxes
    # The score is the mean over the rectangle of the dilated mask, its edge pixels included
    # (as PP-OCR's filled polygon): rows 20..32 and columns 30..180 for the first line.
    assert first.score == pytest.approx(0.8 * 12 * 150 / (13 * 151), rel=1e-6)
    assert second.score == pytest.approx(0.9 * 10 * 130 / (11 * 131), rel=1e-6)
    # On the page (map / 0.5), grown by the unclip distance on each side.
    assert first.points[0, 1] < 40 < first.points[3, 1]
    assert first.points[0, 0] < 60 and first.points[1, 0] > 358
    assert np.all(first.points[:, 0] <= 400) and np.all(first.points >= 0)


def test_low_scores_are_dropped():
    prob = np.zeros((64, 64), np.float32)
    prob[10:30, 10:50] = 0.4   # above the pixel threshold, below the box threshold
    assert ocr_boxes.boxes_from_map(prob, (1.0, 1.0), (64, 64)) == []


def test_crop_of_an_axis_aligned_box_is_the_slice():
    rng = np.random.default_rng()
    page = rng.integers(0, 256, (40, 60, 3)).astype(np.uint8)
    corners = np.array([[5, 7], [45, 7], [45, 27], [5, 27]], np.float32)
    np.testing.assert_allclose(ocr_boxes.crop(page, corners), page[7:27, 5:45], atol=1e-4)
    tall = ocr_boxes.crop(page, np.array([[5, 2], [15, 2], [15, 32], [5, 32]], np.float32))
    assert tall.shape == (10, 30, 3)  # turned to lie along its text


def test_ctc_greedy_merges_repeats_and_drops_blanks():
    alphabet = ["", "a", "b", " "]
    steps = [1, 1, 0, 1, 2, 2, 3, 0, 0]
    probs = np.full((1, len(steps), 4), 0.01, np.float32)
    probs[0, np.arange(len(steps)), steps] = np.linspace(0.5, 0.9, len(steps))
    ((text, score),) = ocr_boxes.ctc_greedy(probs, alphabet)
    assert text == "aab "
    kept = np.linspace(0.5, 0.9, len(steps))[[0, 3, 4, 6]]
    assert score == pytest.approx(float(kept.mean()), rel=1e-6)
    assert ocr_boxes.ctc_greedy(np.eye(4, dtype=np.float32)[[0, 0]][None], alphabet) == [
        ("", 0.0)]


def test_resize_is_bilinear_with_centres_aligned():
    ramp = np.tile(np.arange(8, dtype=np.float32)[None, :, None], (4, 1, 1))
    out = resize(ramp, 4, 16)[0, :, 0]
    centres = np.clip((np.arange(16) + 0.5) / 2 - 0.5, 0, 7)
    np.testing.assert_allclose(out, centres, atol=1e-6)
    same = np.random.default_rng().random((5, 7, 3)).astype(np.float32)
    np.testing.assert_allclose(resize(same, 5, 7), same, atol=1e-6)
    assert resize(np.ones((300, 400, 3), np.uint8), 30, 40).shape == (30, 40, 3)


def test_scaled_size_keeps_the_aspect_within_the_limits():
    assert scaled_size(100, 2000, 960, 96, 32) == (48, 960)
    assert scaled_size(40, 80, 960, 96, 32) == (96, 192)
    assert scaled_size(3000, 1000, 960, 96, 32) == (960, 320)


def test_image_checks_refuse_bad_arrays_clearly():
    with pytest.raises(VkumdTypeError, match="uint8"):
        check_image(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(VkumdTypeError, match="numpy uint8 array"):
        check_image([[0]])
    with pytest.raises(VkumdValueError, match="no pixels"):
        check_image(np.zeros((0, 5, 3), np.uint8))
    with pytest.raises(VkumdValueError, match=r"shape \(4, 4, 2\)"):
        check_image(np.zeros((4, 4, 2), np.uint8))
    huge = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (9000, 8000, 3))
    with pytest.raises(VkumdValueError, match=f"limit of {MAX_PIXELS}"):
        check_image(huge)
    assert check_image(np.zeros((3, 4), np.uint8)).shape == (3, 4, 3)
    assert check_image(np.zeros((3, 4, 4), np.uint8)).shape == (3, 4, 3)
