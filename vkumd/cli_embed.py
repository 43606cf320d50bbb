"""``vkumd embed``: sentence embeddings from the command line.

    vkumd embed "a sentence" "another"                 # one compact line per sentence
    vkumd embed --file in.txt --out emb.npy            # one sentence a line; .npy or .jsonl
    vkumd embed --similarity "a sentence" "another"    # their cosine similarity
    vkumd embed --ray auto --file in.txt --out emb.npy # on Ray actors, one per vulkan_gpu
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from vkumd.errors import VkumdValueError

OUT_FORMATS = (".npy", ".jsonl")


def add_parser(sub: Any) -> None:
    """Register the ``embed`` subcommand on the ``vkumd`` parser's subparsers."""
    from vkumd.framework.models.loader import DEFAULT_MODEL

    p = sub.add_parser("embed", help="embed sentences with a BERT sentence encoder",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sentences", nargs="*", help="sentences to embed")
    p.add_argument("--file", type=Path, help="read sentences from this file, one a line "
                   "(every line counts, blank ones too, so row i is line i)")
    p.add_argument("--out", type=Path, help="write the embeddings here: .npy (float32, "
                   "(n, hidden)) or .jsonl (one {\"text\", \"embedding\"} object a line)")
    p.add_argument("--similarity", action="store_true",
                   help="print the cosine similarity of exactly two sentences")
    p.add_argument("--model", default=DEFAULT_MODEL, help="a model directory or an installed "
                   f"model's name (default {DEFAULT_MODEL})")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16"))
    p.add_argument("--batch-size", type=int, default=32, metavar="N")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--device", default=None, help="device index or name (see vkumd info)")
    p.add_argument("--ray", metavar="ADDRESS", default=None, help="embed on a Ray cluster "
                   "(auto, or HOST:PORT), one actor per vulkan_gpu its nodes declare; needs "
                   "the ray extra (docs/scale-out.md)")
    p.add_argument("--actors", type=int, default=None, metavar="N",
                   help="with --ray: how many actors (default: every vulkan_gpu)")
    p.set_defaults(func=cmd_embed)


def _sentences(args: argparse.Namespace) -> list[str]:
    texts = list(args.sentences)
    if args.file is not None:
        try:
            texts += args.file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise VkumdValueError(f"embed --file {args.file}: cannot read it ({exc})") from None
    if args.similarity and len(texts) != 2:
        raise VkumdValueError(f"embed --similarity takes exactly two sentences, got "
                              f"{len(texts)}")
    if not texts:
        raise VkumdValueError("embed: give sentences as arguments or with --file")
    if args.out is not None and args.out.suffix not in OUT_FORMATS:
        raise VkumdValueError(f"embed --out {args.out}: the name must end in "
                              f"{' or '.join(OUT_FORMATS)}")
    if args.batch_size < 1:
        raise VkumdValueError(f"embed --batch-size {args.batch_size}: it must be >= 1")
    return texts


def compact(vector: np.ndarray, shown: int = 4) -> str:
    """``[0.0412, -0.0213, ..., 0.0123] (384)``: the first and last few values."""
    values = [f"{v:+.4f}" for v in vector]
    if len(values) > 2 * shown:
        values = values[:shown] + ["..."] + values[-shown:]
    return f"[{', '.join(values)}] ({len(vector)})"


def _write(path: Path, texts: list[str], embeddings: np.ndarray) -> None:
    if path.suffix == ".npy":
        np.save(path, embeddings)
        return
    with open(path, "w", encoding="utf-8") as out:
        for text, row in zip(texts, embeddings, strict=True):
            out.write(json.dumps({"text": text, "embedding": [float(v) for v in row]},
                                 ensure_ascii=False) + "\n")


def cmd_embed(args: argparse.Namespace) -> int:
    """Run ``vkumd embed``; see the module docstring."""
    texts = _sentences(args)
    if args.ray is not None:
        embeddings = _embed_on_ray(args, texts)
    else:
        embeddings = _embed_here(args, texts)
    _report(args, texts, embeddings)
    return 0


def _embed_on_ray(args: argparse.Namespace, texts: list[str]) -> np.ndarray:
    """``--ray``: join the cluster, embed on its actors, print the throughput to stderr."""
    from vkumd.framework.ray_pool import embed, ray_module

    if args.actors is not None and args.actors < 1:
        raise VkumdValueError(f"embed --actors {args.actors}: it must be >= 1")
    ray = ray_module()
    ray.init(address=args.ray, log_to_driver=False)
    try:
        result = embed(texts, model=args.model, num_actors=args.actors, dtype=args.dtype,
                       batch_size=args.batch_size)
    finally:
        ray.shutdown()
    stats = result.stats
    print(f"ray: {stats.sentences} sentences in {stats.seconds:.2f} s "
          f"({stats.sentences_per_s:.1f}/s), {stats.retried_batches} batches retried, "
          f"{stats.actors_lost} actors lost", file=sys.stderr)
    return result.embeddings


def _embed_here(args: argparse.Namespace, texts: list[str]) -> np.ndarray:
    """Embed in this process on one device."""
    from vkumd.framework.context import Context
    from vkumd.framework.models.encoder import SentenceEncoder

    device: Any = args.device
    if device is not None and device.isdigit():
        device = int(device)
    with Context(device=device) as ctx:
        encoder = SentenceEncoder.from_pretrained(args.model, ctx=ctx, dtype=args.dtype)
        try:
            embeddings = encoder.encode(texts, batch_size=args.batch_size,
                                        progress=False if args.no_progress else None)
        finally:
            encoder.close()
    return embeddings


def _report(args: argparse.Namespace, texts: list[str], embeddings: np.ndarray) -> None:
    """Print or write the embeddings as the options ask."""
    if args.similarity:
        a, b = embeddings.astype(np.float64)
        print(f"{float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))):.6f}")
    elif args.out is not None:
        try:
            _write(args.out, texts, embeddings)
        except OSError as exc:
            raise VkumdValueError(f"embed --out {args.out}: cannot write it ({exc})") from None
        print(f"wrote {len(texts)} embeddings of {embeddings.shape[1]} values to {args.out}",
              file=sys.stderr)
    else:
        width = len(str(len(texts) - 1))
        for i, (text, row) in enumerate(zip(texts, embeddings, strict=True)):
            shown = text if len(text) <= 40 else text[:37] + "..."
            print(f"{i:>{width}} {compact(row)} {json.dumps(shown, ensure_ascii=False)}")
