"""``vkumd serve``: the embeddings server on 127.0.0.1:8080 by default (docs/serving.md).

    vkumd serve                                   # all-MiniLM-L6-v2, no keys, loopback only
    vkumd serve --api-key-file keys.txt --port 8000   # keys required, still loopback
    VKUMD_SERVE_BATCH_POLICY=fifo vkumd serve     # TEI's batcher, to compare

Every option has an environment variable (shown with its default below); the option wins.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

from vkumd.serve import config

NEEDS = ("starlette", "uvicorn", "prometheus_client")


def add_parser(sub: Any) -> None:
    """Register the ``serve`` subcommand on the ``vkumd`` parser's subparsers."""
    p = sub.add_parser("serve", help="serve embeddings over HTTP (OpenAI's and TEI's APIs)",
                       description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    config.add_arguments(p)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """Check the settings and the server stack, then serve until stopped."""
    missing = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        print(f"vkumd serve: {', '.join(missing)} not installed; install the serve extra: "
              "pip install 'vkumd[serve]'", file=sys.stderr)
        return 2
    settings = config.from_args(args)
    settings.keys()  # an unreadable key file stops us before the model loads
    from vkumd.serve import run

    run(settings)
    return 0
