"""The server's settings: one table of flags, each with its environment variable and help.

The same table builds ``vkumd serve``'s options (:func:`add_arguments`) and
:class:`ServeConfig`, which :func:`vkumd.serve.create_app` takes, so a flag, its variable
and its default are written once. Imports nothing of the server stack, so ``vkumd --help``
works without the ``serve`` extra.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vkumd.errors import VkumdValueError

POLICIES = ("sorted", "fifo")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclasses.dataclass(frozen=True)
class Flag:
    """One option: ``--name`` on the command line, ``env`` in the environment."""

    name: str
    env: str
    default: Any
    kind: Callable[[str], Any] | str
    help: str
    metavar: str | None = None

    @property
    def field(self) -> str:
        return self.name.replace("-", "_")


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{text!r} is not one of 1/0, true/false, yes/no, on/off")


FLAGS: tuple[Flag, ...] = (
    Flag("host", "VKUMD_SERVE_HOST", "127.0.0.1", str,
         "address to listen on; any but loopback exposes the server to the network",
         "ADDR"),
    Flag("port", "VKUMD_SERVE_PORT", 8080, int, "TCP port", "N"),
    Flag("model", "VKUMD_SERVE_MODEL", "all-MiniLM-L6-v2", str,
         "embeddings model: directory or installed model name (none: no embeddings, for a "
         "server that only generates)", "PATH"),
    Flag("served-model-name", "VKUMD_SERVE_MODEL_NAME", None, str,
         "names the model answers to in requests' `model`, comma-separated (default: the "
         "model's name)", "NAMES"),
    Flag("dtype", "VKUMD_SERVE_DTYPE", "float32", str, "float32 or float16", "DTYPE"),
    Flag("device", "VKUMD_SERVE_DEVICE", None, str,
         "device index or name (default: VKUMD_DEVICE or the best device)", "DEV"),
    Flag("api-key", "VKUMD_SERVE_API_KEYS", (), "keys",
         "accepted bearer key; repeat for several (environment: comma-separated); none: no "
         "authentication", "KEY"),
    Flag("api-key-file", "VKUMD_SERVE_API_KEY_FILE", None, str,
         "file of accepted keys, one a line (blank lines and # comments skipped)", "PATH"),
    Flag("auth-probes", "VKUMD_SERVE_AUTH_PROBES", False, "switch",
         "require a key on /health and /metrics too (open by default, for probes)"),
    Flag("max-batch-tokens", "VKUMD_SERVE_MAX_BATCH_TOKENS", 16384, int,
         "token budget of one device batch (padded tokens under the sorted policy, real "
         "tokens under fifo, as TEI counts)", "N"),
    Flag("max-batch-size", "VKUMD_SERVE_MAX_BATCH_SIZE", 64, int,
         "inputs in one device batch at most", "N"),
    Flag("batch-policy", "VKUMD_SERVE_BATCH_POLICY", "sorted", str,
         "sorted: group inputs of similar length from a window of the queue; fifo: arrival "
         "order up to the token budget (TEI's batcher)", "POLICY"),
    Flag("batch-window", "VKUMD_SERVE_BATCH_WINDOW", 1024, int,
         "queued inputs the sorted policy looks at (oldest first) when forming a batch", "N"),
    Flag("max-wait-ms", "VKUMD_SERVE_MAX_WAIT_MS", 100.0, float,
         "an input queued this long goes into the next batch whatever its length", "MS"),
    Flag("max-queue", "VKUMD_SERVE_MAX_QUEUE", 4096, int,
         "inputs queued at most (all requests together); past it requests get 429 with "
         "Retry-After", "N"),
    Flag("queue-timeout-s", "VKUMD_SERVE_QUEUE_TIMEOUT_S", 60.0, float,
         "a request with an input queued this long is answered 503 uncomputed (0: never)",
         "S"),
    Flag("max-inputs", "VKUMD_SERVE_MAX_INPUTS", 2048, int,
         "inputs in one request at most (OpenAI's limit is 2048)", "N"),
    Flag("max-body-bytes", "VKUMD_SERVE_MAX_BODY_BYTES", 16 << 20, int,
         "request body limit; larger bodies get 413 before they are read", "N"),
    Flag("max-input-chars", "VKUMD_SERVE_MAX_INPUT_CHARS", 100_000, int,
         "characters in one text at most (refused with 400 before tokenizing: tokenizing "
         "costs about 2 us a character whatever the model keeps)", "N"),
    Flag("auto-truncate", "VKUMD_SERVE_AUTO_TRUNCATE", False, "switch",
         "truncate texts longer than the model's maximum instead of refusing them (400)"),
    Flag("drain-grace-s", "VKUMD_SERVE_DRAIN_GRACE_S", 5.0, float,
         "on SIGTERM, answer GET /health 503 and keep serving this long before closing the "
         "listener (so a load balancer stops sending first); then finish what was accepted",
         "S"),
    Flag("generate-model", "VKUMD_SERVE_GENERATE_MODEL", None, str,
         "text-generation model served on /v1/completions and /v1/chat/completions: a GGUF "
         "file, a Hugging Face Llama directory, or module:function returning a generator "
         "(none: those routes answer 404)", "PATH"),
    Flag("generate-slots", "VKUMD_SERVE_GENERATE_SLOTS", 8, int,
         "sequences decoded together in one step (the KV cache's slots); more requests wait "
         "for a free slot", "N"),
    Flag("generate-max-context", "VKUMD_SERVE_GENERATE_MAX_CONTEXT", 2048, int,
         "tokens a sequence holds at most, prompt and generated (the cache's length; capped "
         "by the model's context)", "N"),
    Flag("generate-compute", "VKUMD_SERVE_GENERATE_COMPUTE", None, str,
         "quantized (quantized weights stay quantized on the device), float16 or float32 "
         "(dequantised once on load); default: the loader's (quantized for GGUF)", "KIND"),
    Flag("generate-cache-dtype", "VKUMD_SERVE_GENERATE_CACHE_DTYPE", "float16", str,
         "the KV cache's float16 or float32", "DTYPE"),
    Flag("generate-max-tokens", "VKUMD_SERVE_GENERATE_MAX_TOKENS", 1024, int,
         "largest max_tokens a request may ask, and what a chat request without it gets",
         "N"),
    Flag("generate-max-queue", "VKUMD_SERVE_GENERATE_MAX_QUEUE", 64, int,
         "sequences waiting for a slot at most; past it requests get 429 with Retry-After",
         "N"),
    Flag("log-level", "VKUMD_SERVE_LOG_LEVEL", "info", str,
         "uvicorn's log level (critical, error, warning, info, debug)", "LEVEL"),
)


@dataclasses.dataclass
class ServeConfig:
    """What :func:`vkumd.serve.create_app` serves and how (fields as :data:`FLAGS`)."""

    host: str = "127.0.0.1"
    port: int = 8080
    model: str = "all-MiniLM-L6-v2"
    served_model_name: str | None = None
    dtype: str = "float32"
    device: str | None = None
    api_key: tuple[str, ...] = ()
    api_key_file: str | None = None
    auth_probes: bool = False
    max_batch_tokens: int = 16384
    max_batch_size: int = 64
    batch_policy: str = "sorted"
    batch_window: int = 1024
    max_wait_ms: float = 100.0
    max_queue: int = 4096
    queue_timeout_s: float = 60.0
    max_inputs: int = 2048
    max_body_bytes: int = 16 << 20
    max_input_chars: int = 100_000
    auto_truncate: bool = False
    drain_grace_s: float = 5.0
    generate_model: str | None = None
    generate_slots: int = 8
    generate_max_context: int = 2048
    generate_compute: str | None = None
    generate_cache_dtype: str = "float16"
    generate_max_tokens: int = 1024
    generate_max_queue: int = 64
    log_level: str = "info"

    def check(self) -> ServeConfig:
        """Refuse settings that cannot work.

        Raises:
            VkumdValueError: names the setting, its value and the accepted range.
        """
        for name in ("port", "max_batch_tokens", "max_batch_size", "batch_window",
                     "max_queue", "max_inputs", "max_body_bytes", "max_input_chars",
                     "generate_slots", "generate_max_context", "generate_max_tokens",
                     "generate_max_queue"):
            value = getattr(self, name)
            low = 0 if name == "port" else 1
            if value < low:
                raise VkumdValueError(f"serve: {name.replace('_', '-')}={value}; it must be "
                                      f">= {low}")
        for name in ("max_wait_ms", "queue_timeout_s", "drain_grace_s"):
            if getattr(self, name) < 0:
                raise VkumdValueError(f"serve: {name.replace('_', '-')}={getattr(self, name)}; "
                                      "it must be >= 0")
        if self.batch_policy not in POLICIES:
            raise VkumdValueError(f"serve: batch-policy={self.batch_policy!r}; choose one of "
                                  f"{', '.join(POLICIES)}")
        if self.max_queue < self.max_inputs:
            raise VkumdValueError(f"serve: max-queue={self.max_queue} is below max-inputs="
                                  f"{self.max_inputs}, so a full request could never be "
                                  "queued; raise max-queue")
        if self.generate_compute not in (None, "quantized", "float16", "float32"):
            raise VkumdValueError(f"serve: generate-compute={self.generate_compute!r}; choose "
                                  "quantized, float16 or float32")
        if self.generate_cache_dtype not in ("float16", "float32"):
            raise VkumdValueError(f"serve: generate-cache-dtype={self.generate_cache_dtype!r}; "
                                  "choose float16 or float32")
        if not self.embeds and not self.generate_model:
            raise VkumdValueError("serve: model=none and no generate-model: nothing to "
                                  "serve; give --model or --generate-model")
        return self

    @property
    def embeds(self) -> bool:
        """Whether an embeddings model is served (``--model none`` serves none)."""
        return bool(self.model) and self.model.lower() != "none"

    def keys(self) -> frozenset[str]:
        """Every accepted API key (flags and key file together).

        Raises:
            VkumdValueError: the key file cannot be read.
        """
        keys = {k for k in self.api_key if k}
        if self.api_key_file:
            try:
                lines = Path(self.api_key_file).read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise VkumdValueError(f"serve: api-key-file {self.api_key_file}: cannot read "
                                      f"it ({exc})") from None
            keys |= {s.strip() for s in lines if s.strip() and not s.strip().startswith("#")}
        return frozenset(keys)


def _from_env(flag: Flag, environ: Mapping[str, str]) -> Any:
    text = environ.get(flag.env)
    if text is None:
        return flag.default
    try:
        if flag.kind == "keys":
            return tuple(k.strip() for k in text.split(",") if k.strip())
        if flag.kind == "switch":
            return _bool(text)
        return flag.kind(text)  # type: ignore[operator]
    except ValueError as exc:
        raise VkumdValueError(f"{flag.env}={text!r}: {exc}") from None


def add_arguments(parser: argparse.ArgumentParser,
                  environ: Mapping[str, str] | None = None) -> None:
    """Add every flag of :data:`FLAGS` to ``parser``, defaults read from the environment
    (a variable that does not parse is reported by :func:`from_args`)."""
    env = os.environ if environ is None else environ
    for flag in FLAGS:
        try:
            default = _from_env(flag, env)
        except VkumdValueError as exc:
            # Raised by from_args, so that a bad variable stops `vkumd serve` only.
            parser.set_defaults(env_error=str(exc))
            default = flag.default
        # Keys are never printed, not even those from the environment.
        shown = ("hidden" if default else "-") if flag.kind == "keys" else default
        text = f"{flag.help} [env {flag.env}; default: {shown}]"
        if flag.kind == "switch":
            parser.add_argument(f"--{flag.name}", action=argparse.BooleanOptionalAction,
                                default=default, help=text)
        elif flag.kind == "keys":
            parser.add_argument(f"--{flag.name}", action="append", default=None,
                                metavar=flag.metavar, help=text)
            parser.set_defaults(**{f"{flag.field}_env": default})
        else:
            parser.add_argument(f"--{flag.name}", type=flag.kind, default=default,
                                metavar=flag.metavar, help=text)


def from_args(args: argparse.Namespace) -> ServeConfig:
    """The :class:`ServeConfig` of parsed arguments (see :func:`add_arguments`).

    Raises:
        VkumdValueError: an environment variable that did not parse, or a bad setting.
    """
    if getattr(args, "env_error", None):
        raise VkumdValueError(f"serve: {args.env_error}")
    values = {f.field: getattr(args, f.field) for f in FLAGS}
    given = args.api_key
    values["api_key"] = tuple(given) if given else tuple(getattr(args, "api_key_env", ()))
    return ServeConfig(**values).check()
