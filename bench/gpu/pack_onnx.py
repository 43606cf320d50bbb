"""ONNX vision files small enough to travel with the GPU run, and unpacked again there.

Usage: python bench/gpu/pack_onnx.py pack PACK_DIR FILE.onnx...   (here, by prepare.sh)
       python bench/gpu/pack_onnx.py unpack PACK_DIR DEST_DIR     (there, by run.sh)

The PP-OCRv4 detector, recogniser and direction classifier are 16 MB together, a quarter of
the device call's 64 MiB. ``pack`` stores each float32 weight (an initializer or a
``Constant``) of at least 64 values within float16's range as float16, names them in the
file's ``vkumd.packed_float16`` metadata, and xz-compresses the file: about 6.7 MiB for the
three. ``unpack`` turns those back into float32, so the graph is the original's with its
weights rounded to float16 precision (small constants such as epsilons stay exact). vkumd and
its peer both read the unpacked file, so they compute with the same values; the vision rows
compare them with each other, not with the original file.
"""

from __future__ import annotations

import argparse
import lzma
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MARK = "vkumd.packed_float16"  # the weights pack() stored as float16
FLOAT16_MAX = 65504.0


def _weights(proto: Any) -> Iterator[tuple[str, Any]]:
    """Each weight tensor with a key naming it: initializers by name, and the ``value`` of
    ``Constant`` nodes (where PaddlePaddle's exporter puts the weights) by the node's output."""
    yield from ((t.name, t) for t in proto.graph.initializer)
    for node in proto.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.HasField("t"):
                    yield "constant:" + node.output[0], attr.t


def pack(dest: Path, files: list[Path]) -> None:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    dest.mkdir(parents=True, exist_ok=True)
    for path in files:
        proto = onnx.load(str(path))
        names = []
        for key, tensor in _weights(proto):
            if tensor.data_type != onnx.TensorProto.FLOAT:
                continue
            original = numpy_helper.to_array(tensor)
            if original.size >= 64 and np.all(np.abs(original) <= FLOAT16_MAX):
                values = original.astype(np.float16)
                tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
                names.append(key)
        proto.metadata_props.add(key=MARK, value="\n".join(names))
        data = lzma.compress(proto.SerializeToString(), preset=9 | lzma.PRESET_EXTREME)
        (dest / (path.name + ".xz")).write_bytes(data)
        print(f"pack_onnx: {path.name}: {path.stat().st_size / 2**20:.1f} MiB -> "
              f"{len(data) / 2**20:.1f} MiB")


def unpack(pack_dir: Path, dest: Path) -> None:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    dest.mkdir(parents=True, exist_ok=True)
    for packed in sorted(pack_dir.glob("*.onnx.xz")):
        proto = onnx.load_from_string(lzma.decompress(packed.read_bytes()))
        (mark,) = [p for p in proto.metadata_props if p.key == MARK]
        names = set(mark.value.split("\n"))
        for key, tensor in _weights(proto):
            if key in names:
                values = numpy_helper.to_array(tensor).astype(np.float32)
                tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
        proto.metadata_props.remove(mark)
        onnx.save(proto, str(dest / packed.name.removesuffix(".xz")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("pack", "unpack"))
    parser.add_argument("pack_dir", type=Path)
    parser.add_argument("paths", nargs="+", type=Path,
                        help="pack: the .onnx files; unpack: the destination folder")
    args = parser.parse_args(argv)
    if args.action == "pack":
        pack(args.pack_dir, args.paths)
    else:
        unpack(args.pack_dir, args.paths[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
