"""``vkumd.models.OCR`` and ``Orientation`` on text rendered with Pillow's default font: the
recognised strings, upside-down lines, page rotation, vkumd against onnxruntime on the same
files and images, and every bad input a clear error (the CLI's in test_cli_ocr.py).

Skips, saying why, without Pillow, onnxruntime or the model packages; the vkumd comparisons
skip while vkumd cannot import or run a network (naming the missing operators)."""

from __future__ import annotations

import numpy as np
import pytest

from vkumd.errors import VkumdError, VkumdTypeError, VkumdValueError
from vkumd.testing.numerics import rel_error

PIL = pytest.importorskip("PIL", reason="Pillow renders the test images: pip install "
                          "vkumd[vision]")
pytest.importorskip("onnxruntime", reason="onnxruntime is the reference: pip install "
                    "vkumd[onnx]")

from PIL import Image, ImageDraw, ImageFont  # noqa: E402

from vkumd.framework.models.errors import ModelNotFound  # noqa: E402
from vkumd.framework.models.ocr import OCR, Orientation, ocr_model_dir  # noqa: E402

LINES = ["Vulkan compute 42", "The quick brown fox", "OCR on any GPU", "pad to 32, bucket it"]


def render(lines: list[str], size: int) -> np.ndarray:
    """White page, black text in Pillow's default font at ``size`` pixels."""
    font = ImageFont.load_default(size=size)
    img = Image.new("RGB", (size * 14, int(size * 1.8 * len(lines)) + 20), "white")
    draw = ImageDraw.Draw(img)
    for i, text in enumerate(lines):
        draw.text((10, 10 + int(i * size * 1.8)), text, fill="black", font=font)
    return np.asarray(img).copy()


def skimage_image(name: str):
    """A photograph or scan that scikit-image's wheel ships (found without importing it), or
    a skip saying how to install it."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("scikit-image ships the real test images: pip install --no-deps "
                    "scikit-image (its data files only)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / name
    if not path.is_file():
        pytest.skip(f"{path} is missing from the installed scikit-image")
    return path


@pytest.fixture(scope="module")
def reference_ocr():
    try:
        ocr_model_dir()
    except ModelNotFound as exc:
        pytest.skip(str(exc))
    with OCR("onnxruntime") as ocr:
        yield ocr


@pytest.mark.parametrize("size", [18, 24, 32, 44])
def test_reads_rendered_lines(reference_ocr, size):
    result = reference_ocr(render(LINES, size))
    assert [line.text for line in result.lines] == LINES
    for line in result.lines:
        assert 0.5 <= line.score <= 1 and 0.5 <= line.box_score <= 1
        assert line.box.shape == (4, 2) and not line.rotated
    assert result.size == render(LINES, size).shape[:2]


def test_upside_down_lines_are_turned_over(reference_ocr):
    page = render(LINES[:2], 32)[::-1, ::-1].copy()
    result = reference_ocr(page)
    assert [line.text for line in result.lines] == LINES[:2][::-1]
    assert all(line.rotated for line in result.lines)


def test_files_and_arrays_read_the_same(reference_ocr, tmp_path):
    page = render(LINES[:2], 24)
    Image.fromarray(page).save(tmp_path / "page.png")
    Image.fromarray(page).convert("L").save(tmp_path / "gray.png")
    want = [line.text for line in reference_ocr(page).lines]
    assert [line.text for line in reference_ocr(tmp_path / "page.png").lines] == want
    assert [line.text for line in reference_ocr(str(tmp_path / "gray.png")).lines] == want


def test_reads_a_scanned_page(reference_ocr):
    lines = [line.text for line in reference_ocr(skimage_image("page.png")).lines]
    # scikit-image's scan of a textbook page: its heading and the first line read exactly.
    assert lines[:2] == ["Region-based segmentation",
                         "Let us first determine markers of the coins and the"]
    assert len(lines) >= 4


def test_orientation_names_each_quarter_turn():
    try:
        orientation = Orientation("onnxruntime")
    except ModelNotFound as exc:
        pytest.skip(str(exc))
    page = render(LINES, 24)
    for k in range(4):
        angle, score = orientation(np.rot90(page, k).copy())
        # np.rot90 turns counter-clockwise; the model names the clockwise turn that undoes it.
        assert angle == (-90 * k) % 360 and score > 0.5


def test_bad_inputs_are_clear_errors_and_the_pipeline_stays_usable(reference_ocr, tmp_path):
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "empty.png").write_bytes(b"")
    Image.new("1", (9000, 8000)).save(tmp_path / "huge.png")
    cases = [(tmp_path / "missing.png", VkumdValueError, "no such file"),
             (tmp_path, VkumdValueError, "is a directory"),
             (tmp_path / "notes.txt", VkumdValueError, "not an image"),
             (tmp_path / "empty.png", VkumdValueError, "not an image"),
             (tmp_path / "huge.png", VkumdValueError, "9000 x 8000 is 72000000 pixels"),
             (np.zeros((0, 0, 3), np.uint8), VkumdValueError, "no pixels"),
             (np.zeros((8, 8, 3), np.float64), VkumdTypeError, "uint8")]
    for image, kind, words in cases:
        with pytest.raises(kind, match=words):
            reference_ocr(image)
    assert [line.text for line in reference_ocr(render(LINES, 24)).lines] == LINES


def test_a_blank_page_has_no_lines(reference_ocr):
    assert reference_ocr(np.full((64, 300, 3), 255, np.uint8)).lines == []


def test_missing_model_files_are_named(tmp_path):
    with pytest.raises(ModelNotFound, match="ch_PP-OCRv4_det_infer.onnx"):
        OCR("onnxruntime", model_dir=tmp_path)
    with pytest.raises(VkumdValueError, match="choose 'vkumd' or 'onnxruntime'"):
        OCR("tensorrt")


@pytest.fixture(scope="module")
def device_ocr(reference_ocr):
    import vkumd

    with vkumd.Context() as ctx, OCR("vkumd", ctx=ctx) as ocr:
        try:
            ocr.probability_map(render(LINES[:1], 24))
        except VkumdError as exc:
            pytest.skip(f"vkumd cannot run the detector yet: {str(exc)[:300]}")
        yield ocr


@pytest.mark.parametrize("size", [20, 36])
def test_vkumd_detector_map_matches_onnxruntime(device_ocr, reference_ocr, size):
    page = render(LINES, size)
    got = device_ocr.probability_map(page)
    want = reference_ocr.probability_map(page)
    assert got.shape == want.shape
    assert rel_error(got, want) <= 1e-4


def test_vkumd_detector_map_matches_onnxruntime_on_a_photograph(device_ocr, reference_ocr):
    photo = skimage_image("rocket.jpg")
    got, want = device_ocr.probability_map(photo), reference_ocr.probability_map(photo)
    assert rel_error(got, want) <= 1e-4


def test_vkumd_reads_the_same_strings_as_onnxruntime(device_ocr, reference_ocr):
    pages = [render(LINES, 24), render(LINES[:2], 32)[::-1, ::-1].copy()]
    for page in [*pages, skimage_image("page.png")]:
        got = device_ocr(page)
        want = reference_ocr(page)
        assert [line.text for line in got.lines] == [line.text for line in want.lines]
        assert [line.rotated for line in got.lines] == [line.rotated for line in want.lines]


def test_vkumd_orientation_matches_onnxruntime():
    import vkumd

    try:
        reference = Orientation("onnxruntime")
    except ModelNotFound as exc:
        pytest.skip(str(exc))
    page = render(LINES, 24)
    with vkumd.Context() as ctx, Orientation("vkumd", ctx=ctx) as orientation:
        for k in (0, 1):
            turned = np.rot90(page, k).copy()
            try:
                got = orientation(turned)
            except VkumdError as exc:
                pytest.skip(f"vkumd cannot run the orientation model yet: {str(exc)[:300]}")
            want = reference(turned)
            assert got[0] == want[0] and got[1] == pytest.approx(want[1], rel=1e-4)


def test_vkumd_backend_imports_one_graph_per_shape(tmp_path):
    """The backend's own path on a network vkumd runs today: a strided convolution with a
    symbolic page size, called at two sizes, each against onnxruntime."""
    import onnx
    import onnxruntime
    from onnx import helper, numpy_helper

    import vkumd
    from vkumd.framework.models import vision_backend

    rng = np.random.default_rng()
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "strided",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [w])
    path = tmp_path / "strided.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with vkumd.Context() as ctx:
        backend = vision_backend.VkumdBackend(ctx=ctx)
        run = backend.load(path)
        for h, wd in ((32, 64), (96, 32), (32, 64)):
            x = rng.standard_normal((1, 3, h, wd)).astype(np.float32)
            got = run(x)
            want = session.run(None, {"x": x})[0]
            assert got.shape == want.shape == (1, 4, h // 2, wd // 2)
            assert rel_error(got, want) <= 1e-5
        backend.close()  # not its context: left open
        assert not ctx.closed
