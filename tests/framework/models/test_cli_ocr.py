"""``vkumd ocr``: text and JSON output over the onnxruntime backend in-process, and bad files
and missing models through a real subprocess: exit status, one message each, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vkumd.cli import main
from vkumd.framework.models import ocr as ocr_module
from vkumd.framework.models.errors import ModelNotFound

pytest.importorskip("PIL", reason="Pillow renders the test images: pip install vkumd[vision]")
pytest.importorskip("onnxruntime", reason="onnxruntime runs the networks here: pip install "
                    "vkumd[onnx]")

from PIL import Image, ImageDraw, ImageFont  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
TEXT = ["Hello Vulkan 2026", "compute runtime for ML"]


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    try:
        ocr_module.ocr_model_dir()
    except ModelNotFound as exc:
        pytest.skip(str(exc))
    img = Image.new("RGB", (520, 160), "white")
    draw = ImageDraw.Draw(img)
    draw.text((20, 20), TEXT[0], fill="black", font=ImageFont.load_default(size=32))
    draw.text((20, 90), TEXT[1], fill="black", font=ImageFont.load_default(size=24))
    path = tmp_path_factory.mktemp("ocr") / "page.png"
    img.save(path)
    return path


def test_text_output_has_each_line_with_score_and_box(page, capsys):
    assert main(["ocr", "--backend", "onnxruntime", str(page)]) == 0
    out = capsys.readouterr()
    rows = out.out.splitlines()
    assert rows[0].startswith(f"# {page} (520 x 160, 2 lines,")
    for row, text in zip(rows[1:], TEXT, strict=True):
        score, rest = row.split(" ", 1)
        assert 0.5 <= float(score) <= 1
        corners, got = rest[1:].split("] ", 1)
        assert got == text and len(corners.split()) == 4
    assert out.err == ""  # one file: no progress


def test_json_output_and_progress_for_several_files(page, capsys):
    assert main(["ocr", "--backend", "onnxruntime", "--json", "--orientation",
                 str(page), str(page)]) == 0
    out = capsys.readouterr()
    records = [json.loads(row) for row in out.out.splitlines()]
    assert len(records) == 2
    for record in records:
        assert record["file"] == str(page)
        assert (record["width"], record["height"]) == (520, 160)
        assert [line["text"] for line in record["lines"]] == TEXT
        box = np.array(record["lines"][0]["box"])
        assert box.shape == (4, 2) and record["orientation"]["degrees"] == 0
        assert set(record["seconds"]) == {"detect", "classify", "recognise"}
    assert "[1/2]" in out.err and "[2/2]" in out.err


def test_missing_model_exits_2(monkeypatch, page, capsys):
    def missing() -> Path:
        raise ModelNotFound("the rapidocr-onnxruntime package is not installed")

    monkeypatch.setattr(ocr_module, "ocr_model_dir", missing)
    assert main(["ocr", "--backend", "onnxruntime", str(page)]) == 2
    assert "rapidocr-onnxruntime package is not installed" in capsys.readouterr().err


def test_bad_files_fail_alone_without_a_traceback(page, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "empty.jpg").write_bytes(b"")
    run = subprocess.run([sys.executable, "-m", "vkumd.cli", "ocr", "--backend",
                          "onnxruntime", str(tmp_path / "missing.png"),
                          str(tmp_path / "notes.txt"), str(tmp_path / "empty.jpg"), str(page)],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert f"image {tmp_path / 'missing.png'}: no such file" in run.stderr
    assert f"image {tmp_path / 'notes.txt'}: not an image" in run.stderr
    assert f"image {tmp_path / 'empty.jpg'}: not an image" in run.stderr
    assert "3 of 4 images failed" in run.stderr
    assert TEXT[0] in run.stdout and TEXT[1] in run.stdout


def _tiny_model_dir(folder: Path, det_op: str) -> Path:
    """Three stand-in networks: a detector of one ``det_op`` node, a classifier and a
    recogniser that are identities, the recogniser carrying a character list."""
    import onnx
    from onnx import helper

    def save(name: str, op: str, characters: str | None = None) -> None:
        graph = helper.make_graph(
            [helper.make_node(op, ["x"], ["y"])], name,
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, "h", "w"])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        if characters is not None:
            helper.set_model_props(model, {"character": characters})
        onnx.save(model, folder / name)

    save(ocr_module.DET_FILE, det_op)
    save(ocr_module.CLS_FILE, "Identity")
    save(ocr_module.REC_FILE, "Identity", "a\nb")
    return folder


def test_a_network_vkumd_cannot_import_ends_the_command_with_2(page, tmp_path):
    folder = _tiny_model_dir(tmp_path, "Det")  # ONNX's Det: no vkumd converter
    run = subprocess.run([sys.executable, "-m", "vkumd.cli", "ocr", "--model-dir", str(folder),
                          str(page), str(page)], capture_output=True, text=True, cwd=REPO,
                         timeout=300)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert "cannot be imported (operators Det)" in run.stderr
    assert run.stdout == ""


@pytest.mark.parametrize("pad_batch", [False, True])
def test_a_backend_of_ones_own_runs_the_same_processing(page, pad_batch):
    """The pipeline takes any object with load(path) -> run(x): here onnxruntime's sessions
    behind a wrapper that records each call's input shape; with ``pad_batch`` every
    classifier and recogniser call has the full batch of rows (as vkumd's backend asks)."""
    from vkumd.framework.models.vision_backend import OnnxruntimeBackend

    shapes: list[tuple[str, tuple[int, ...]]] = []

    class Recording:
        name = "recording"
        pad_batch = False

        def __init__(self) -> None:
            self.inner = OnnxruntimeBackend()

        def load(self, path: Path):
            run = self.inner.load(path)

            def call(x: np.ndarray) -> np.ndarray:
                shapes.append((path.name, x.shape))
                return run(x)

            return call

    backend = Recording()
    backend.pad_batch = pad_batch
    with ocr_module.OCR(backend) as ocr:
        assert [line.text for line in ocr(page).lines] == TEXT
    assert shapes[0] == (ocr_module.DET_FILE, (1, 3, 160, 544))  # 520 x 160 padded to 32s
    rows = ocr_module.BATCH if pad_batch else 2
    assert (ocr_module.CLS_FILE, (rows, 3, 48, 192)) in shapes
    assert all(s[0] == rows for name, s in shapes if name != ocr_module.DET_FILE)
    assert all(s[3] in ocr_module.REC_WIDTHS for name, s in shapes
               if name == ocr_module.REC_FILE)
