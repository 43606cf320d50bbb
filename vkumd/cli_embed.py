"""``vkumd embed``: sentence embeddings from the command line.

    vkumd embed "a sentence" "another"                 # one compact line per sentence
    vkumd embed --file in.txt --out emb.npy            # one sentence a line; .npy or .jsonl
    vkumd embed --file - < in.txt                      # the lines of stdin
    vkumd embed --similarity "a sentence" "another"    # their cosine similarity
    vkumd embed --ray auto --file in.txt --out emb.npy # on Ray actors, one per vulkan_gpu
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from vkumd.cli_input import (
    MAX_LINE_BYTES,
    STDIN,
    LineReader,
    Sentence,
    StreamProgress,
    check_arguments,
    open_input,
)
from vkumd.cli_output import OUT_FORMATS, Output
from vkumd.errors import VkumdValueError

# Sentences are read and embedded up to this many batches at a time: the encoder sorts each
# chunk by length before batching, and on sentences of 3 to 40 random words 16 batches pad
# 2% past a sort of the whole input (4 batches: 15%), while memory stays bounded by the
# chunk, not the input. A chunk also ends early when the input has nothing more ready, so a
# slow pipe's lines are embedded as they arrive.
CHUNK_BATCHES = 16
CHUNK_BYTES = 16 << 20
# Truncated sentences named in the note on stderr; the rest are counted.
NAMED_TRUNCATIONS = 5

EPILOG = f"""\
input: the sentence arguments first, then the lines of --file, one sentence each, in order;
  row i of the output is the i-th sentence. A line ends at \\n (\\r\\n counts as one newline);
  every other character (\\r alone, \\f, \\v, \\x1c-\\x1e, U+0085, U+2028, U+2029) stays in
  its line. Blank lines are sentences too; the last line needs no newline. Input must be
  UTF-8; a line or argument that is not is an error naming it. --file is read as a stream,
  line by line (a regular file, a FIFO, or - for stdin), and embedded as it is read; .jsonl,
  .npy and stdout are written as rows are ready (with --ray the input is read whole first).

limits: a line (or argument) over --max-line-bytes (default {MAX_LINE_BYTES}, 1 MiB) is an
  error naming it. A sentence longer than the model's token limit (max_seq_length, 256 for
  all-MiniLM-L6-v2) is truncated to it, as sentence-transformers does, with a note on stderr
  naming the lines (not with --ray).

output: --out is written to a temporary file beside it and renamed onto it at the end; a
  failed run leaves no partial file and an existing --out untouched. An --out that cannot
  be created fails before the model loads.

exit status: 0 done; 2 an error (a bad option, argument, line, encoding, unreadable input,
  unwritable output, a missing model, a device failure), one line 'vkumd: ...' on stderr;
  130 interrupted; 141 stdout closed early (vkumd embed ... | head).
"""


def add_parser(sub: Any) -> None:
    """Register the ``embed`` subcommand on the ``vkumd`` parser's subparsers."""
    from vkumd.framework.models.loader import DEFAULT_MODEL

    p = sub.add_parser("embed", help="embed sentences with a BERT sentence encoder",
                       description=__doc__, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sentences", nargs="*", help="sentences to embed")
    p.add_argument("--file", type=Path, help="read sentences from this file (- for stdin), "
                   "one a line (every line counts, blank ones too, so row i is line i)")
    p.add_argument("--out", type=Path, help="write the embeddings here: .npy (float32, "
                   "(n, hidden)) or .jsonl (one {\"text\", \"embedding\"} object a line)")
    p.add_argument("--similarity", action="store_true",
                   help="print the cosine similarity of exactly two sentences")
    p.add_argument("--model", default=DEFAULT_MODEL, help="a model directory or an installed "
                   f"model's name (default {DEFAULT_MODEL})")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16"))
    p.add_argument("--batch-size", type=int, default=32, metavar="N")
    p.add_argument("--max-line-bytes", type=int, default=MAX_LINE_BYTES, metavar="N",
                   help=f"the longest line or argument accepted, in UTF-8 bytes (default "
                   f"{MAX_LINE_BYTES})")
    p.add_argument("--no-progress", action="store_true", help="no progress line on stderr "
                   "(drawn only when stderr is a terminal and the rows do not go to it)")
    p.add_argument("--device", default=None, help="device index or name (see vkumd info)")
    p.add_argument("--ray", metavar="ADDRESS", default=None, help="embed on a Ray cluster "
                   "(auto, or HOST:PORT), one actor per vulkan_gpu its nodes declare; needs "
                   "the ray extra (docs/scale-out.md)")
    p.add_argument("--actors", type=int, default=None, metavar="N",
                   help="with --ray: how many actors (default: every vulkan_gpu)")
    p.set_defaults(func=cmd_embed)


def _check_options(args: argparse.Namespace) -> None:
    for flag, value in (("--batch-size", args.batch_size),
                        ("--max-line-bytes", args.max_line_bytes), ("--actors", args.actors)):
        if value is not None and value < 1:
            raise VkumdValueError(f"embed {flag} {value}: it must be >= 1")
    if args.out is not None and args.out.suffix not in OUT_FORMATS:
        raise VkumdValueError(f"embed --out {args.out}: the name must end in "
                              f"{' or '.join(OUT_FORMATS)}")


def cmd_embed(args: argparse.Namespace) -> int:
    """Run ``vkumd embed``; see the module docstring.

    Raises:
        VkumdValueError: a bad option, argument or line, unreadable input, unwritable output.
    """
    _check_options(args)
    arguments = check_arguments(args.sentences, args.max_line_bytes)
    if args.file is None and not arguments:
        raise VkumdValueError("embed: give sentences as arguments or with --file")
    stream, size, reader = None, None, None
    if args.file is not None:
        stream, size = open_input(args.file)
        reader = LineReader(stream, str(args.file), args.max_line_bytes)
    try:
        source = itertools.chain(arguments, reader if reader is not None else ())
        if args.similarity:
            _similarity(args, source)
            return 0
        output = Output(args.out)
        try:
            _embed_all(args, source, output, reader, size)
            output.finish()
        except BaseException:
            output.abort()
            raise
    finally:
        if stream is not None and str(args.file) != STDIN:
            stream.close()
    if args.out is not None:
        print(f"wrote {output.rows} embeddings of {output.columns} values to {args.out}",
              file=sys.stderr)
    return 0


def _similarity(args: argparse.Namespace, source: Iterable[Sentence]) -> None:
    texts = [s.text for s in itertools.islice(source, 3)]
    if len(texts) != 2:
        more = "more than 2" if len(texts) > 2 else str(len(texts))
        raise VkumdValueError(f"embed --similarity takes exactly two sentences, got {more}")
    if args.ray is not None:
        embeddings = _embed_on_ray(args, texts)
    else:
        with _encoder(args) as encoder:
            embeddings = encoder.encode(texts, progress=False)
    a, b = embeddings.astype(np.float64)
    print(f"{float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))):.6f}")


def _chunks(source: Iterable[Sentence], lines: int,
            ready: Callable[[], bool]) -> Iterator[list[Sentence]]:
    """Runs of at most ``lines`` sentences and about :data:`CHUNK_BYTES` of text, each
    ended early when ``ready()`` says the next sentence would wait for input."""
    chunk: list[Sentence] = []
    held = 0
    for sentence in source:
        chunk.append(sentence)
        held += len(sentence.text)
        if len(chunk) >= lines or held >= CHUNK_BYTES or not ready():
            yield chunk
            chunk, held = [], 0
    if chunk:
        yield chunk


def _embed_all(args: argparse.Namespace, source: Iterable[Sentence], output: Output,
               reader: LineReader | None, size: int | None) -> None:
    """Embed every sentence into ``output``, in order, a chunk at a time."""
    if args.ray is not None:
        sentences = list(source)
        _require_some(args, len(sentences))
        texts = [s.text for s in sentences]
        output.write(texts, _embed_on_ray(args, texts))
        return
    # The first chunk is read before the model loads, so an empty input or a bad first line
    # fails at once.
    chunks = _chunks(source, args.batch_size * CHUNK_BATCHES,
                     reader.ready if reader is not None else lambda: True)
    first = next(chunks, [])
    _require_some(args, len(first))
    draw = (not args.no_progress and sys.stderr.isatty()
            and (args.out is not None or not sys.stdout.isatty()))
    progress = StreamProgress(draw, size)
    truncated: list[str] = []
    try:
        with _encoder(args) as encoder:
            for chunk in itertools.chain([first], chunks):
                texts = [s.text for s in chunk]
                # The tokenizer truncates silently; its overflow says which were cut.
                encodings = encoder.files.tokenizer.encode_batch(texts)
                truncated += [s.where for s, e in zip(chunk, encodings, strict=True)
                              if e.overflowing]
                output.write(texts, encoder.encode(texts, batch_size=args.batch_size,
                                                   progress=False))
                progress.update(output.rows, reader.bytes_read if reader else 0)
            limit = encoder.max_seq_length
    finally:
        progress.close()
    if truncated:
        named = ", ".join(truncated[:NAMED_TRUNCATIONS])
        if len(truncated) > NAMED_TRUNCATIONS:
            named += f" and {len(truncated) - NAMED_TRUNCATIONS} more"
        print(f"vkumd embed: note: {len(truncated)} of {output.rows} sentences were longer "
              f"than the model's limit of {limit} tokens; only their first {limit} were "
              f"embedded, as sentence-transformers does ({named})", file=sys.stderr)


def _require_some(args: argparse.Namespace, rows: int) -> None:
    if rows == 0:
        raise VkumdValueError(f"embed --file {args.file}: it has no lines; give at least "
                              "one sentence")


@contextmanager
def _encoder(args: argparse.Namespace) -> Iterator[Any]:
    """The sentence encoder on its own context, closed on the way out."""
    from vkumd.framework.context import Context
    from vkumd.framework.models.encoder import SentenceEncoder

    device: Any = args.device
    if device is not None and device.isdigit():
        device = int(device)
    with Context(device=device) as ctx:
        encoder = SentenceEncoder.from_pretrained(args.model, ctx=ctx, dtype=args.dtype)
        try:
            yield encoder
        finally:
            encoder.close()


def _embed_on_ray(args: argparse.Namespace, texts: list[str]) -> np.ndarray:
    """``--ray``: join the cluster, embed on its actors, print the throughput to stderr."""
    from vkumd.framework.ray_pool import embed, ray_module

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
