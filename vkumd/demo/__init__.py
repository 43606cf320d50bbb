"""The demo ``make demo`` runs: real work on the default device, each result checked against
numpy, with timings. Not part of the library's API; run it with ``python -m vkumd.demo`` or
``vkumd demo``.

One module per part: :mod:`~vkumd.demo.main` (elementwise work and the order of the parts),
:mod:`~vkumd.demo.gemm` and :mod:`~vkumd.demo.attention`.
"""
