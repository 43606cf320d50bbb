"""``TextGenerator``: a decoder language model's text in, text out, as llama.cpp's
``llama-cli`` and Hugging Face's ``generate`` do.

The generator owns a :class:`~vkumd.framework.models.llama.LlamaRunner` (the model on the
device, with a KV cache of ``slots`` sequences) and a
:class:`~vkumd.framework.models.scheduler.Scheduler` that batches requests over those slots:
:meth:`TextGenerator.generate_batch` decodes its prompts together, and a server submits to
:attr:`TextGenerator.scheduler` directly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.models.gguf import GGUFFile
from vkumd.framework.models.llama_config import config_from_gguf, config_from_hf
from vkumd.framework.models.llama_tokenizer import (
    load_hf_tokenizer,
    render_chat,
    tokenizer_from_gguf,
)
from vkumd.framework.models.llama_weights import load_gguf_weights, load_hf_weights
from vkumd.framework.models.sampling import SamplingParams
from vkumd.framework.models.scheduler import Handle, Scheduler

# Loading defaults: sequences decoded together (a few concurrent requests without a large
# cache: SmolLM2's float16 cache is 45 MiB per 2048-position sequence), and positions per
# sequence (capped by the model's own context length).
DEFAULT_SLOTS = 4
DEFAULT_MAX_CONTEXT = 2048


class TextGenerator:
    """Text generation with a Llama-family model on a vkumd device.

    Build it with :meth:`from_gguf` or :meth:`from_pretrained`; call :meth:`generate`,
    :meth:`chat` or :meth:`generate_batch`; :meth:`close` frees the model (and the context,
    when the generator made it). Also a context manager.

    Args:
        runner: the model (a ``LlamaRunner``, or any object with its interface).
        tokenizer: a ``tokenizers.Tokenizer`` (``encode(text).ids``, ``decode(ids)``).
        config: the model's ``LlamaConfig`` (``eos_ids``, ``bos_id``, ``chat_template``).
        context: the vkumd context, closed by :meth:`close` when ``owns_context``.

    Attributes:
        runner, tokenizer, config: as given.
        scheduler: the :class:`Scheduler` every call goes through.
        last_stats: the last call's numbers: ``prompt_tokens``, ``generated_tokens``,
            ``decoded_tokens`` (those from decode steps, an end-of-sequence id included: the
            first token of each sequence comes from its prefill), ``prefill_seconds``,
            ``decode_seconds``, ``prefill_tokens_per_s``, ``decode_tokens_per_s`` (summed over
            the sequences of a batch), ``finish_reasons``.
    """

    def __init__(self, runner: Any, tokenizer: Any, config: Any, context: Any = None,
                 owns_context: bool = False) -> None:
        self.runner = runner
        self.tokenizer = tokenizer
        self.config = config
        self.context = context
        self._owns_context = owns_context
        self.scheduler = Scheduler(runner, self._decode, eos_ids=tuple(config.eos_ids),
                                   vocab_size=getattr(runner, "vocab_size", None)
                                   or config.vocab_size)
        self.last_stats: dict[str, Any] = {}
        self._closed = False

    # -- loading ----------------------------------------------------------------------

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str], ctx: Any = None, *,
                  slots: int = DEFAULT_SLOTS, max_context: int | None = None,
                  cache_dtype: str = "float16", compute: str = "quantized") -> TextGenerator:
        """Load a Llama-family GGUF file (its weights, config, tokenizer, chat template).

        Args:
            path: the ``.gguf`` file.
            ctx: the :class:`~vkumd.framework.context.Context` to run on; a new one (closed
                by :meth:`close`) when None.
            slots: sequences decoded together (the KV cache holds this many).
            max_context: positions per sequence, prompt and generated text together
                (default: the model's context length, at most :data:`DEFAULT_MAX_CONTEXT`).
            cache_dtype: the KV cache's ``"float16"`` or ``"float32"``.
            compute: ``"quantized"`` (quantized matrices stay quantized on the device),
                ``"float16"`` or ``"float32"`` (dequantised once on load).

        Raises:
            ModelFileError: the file is missing, not a GGUF, or not a model vkumd runs.
            VkumdValueError: a bad option; OutOfDeviceMemory: the weights and the cache do
                not fit (the message says how much they need).
        """
        with GGUFFile(path) as gguf:
            config = config_from_gguf(gguf)
            tokenizer = tokenizer_from_gguf(gguf)
            weights = load_gguf_weights(gguf, config)
        return cls._build(config, tokenizer, weights, ctx, dict(
            slots=slots, max_context=max_context, cache_dtype=cache_dtype, compute=compute))

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike[str], ctx: Any = None, *,
                        slots: int = DEFAULT_SLOTS, max_context: int | None = None,
                        cache_dtype: str = "float16",
                        compute: str = "float32") -> TextGenerator:
        """Load a Hugging Face Llama model directory (``config.json``, ``*.safetensors``,
        ``tokenizer.json``; the chat template from ``tokenizer_config.json``).

        Args:
            directory: the model directory.
            ctx, slots, max_context, cache_dtype: as for :meth:`from_gguf`.
            compute: ``"float32"`` or ``"float16"`` (the weights are not quantized).

        Raises:
            ModelFileError: a file is missing or not a model vkumd runs.
        """
        config = config_from_hf(directory)
        tokenizer = load_hf_tokenizer(directory)
        weights = load_hf_weights(directory, config)
        return cls._build(config, tokenizer, weights, ctx, dict(
            slots=slots, max_context=max_context, cache_dtype=cache_dtype, compute=compute))

    @classmethod
    def _build(cls, config: Any, tokenizer: Any, weights: Any, ctx: Any,
               options: dict[str, Any]) -> TextGenerator:
        from vkumd.framework.context import Context
        from vkumd.framework.models.llama_runner import LlamaRunner

        if options["max_context"] is None:
            options["max_context"] = min(DEFAULT_MAX_CONTEXT, int(config.context_length))
        context = Context() if ctx is None else ctx
        try:
            runner = LlamaRunner(context, config, weights, **options)
        except BaseException:
            if ctx is None:
                context.close()
            raise
        return cls(runner, tokenizer, config, context=context, owns_context=ctx is None)

    # -- text <-> ids -----------------------------------------------------------------

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def encode(self, text: str) -> list[int]:
        """The prompt ids of ``text`` (with the model's BOS id first when it has one).

        Raises:
            VkumdTypeError: ``text`` is not a str.
        """
        if not isinstance(text, str):
            raise VkumdTypeError(f"prompt must be a str, not {type(text).__name__}")
        ids = list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        bos = getattr(self.config, "bos_id", None)
        if bos is not None and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        return ids

    def render_chat(self, messages: Any) -> str:
        """The prompt text for ``messages`` in the model's chat template (ChatML when it has
        none), ending where the assistant's reply begins.

        Raises:
            VkumdTypeError: not a list of ``{"role", "content"}`` dicts of strings.
            VkumdValueError: no messages, a message without a role or content, an unknown
                role, or the template refuses them.
        """
        return render_chat(self.config, messages, add_generation_prompt=True)

    # -- generating -------------------------------------------------------------------

    def _submit(self, prompt: str, options: dict[str, Any]) -> Handle:
        self._check_open()
        params = SamplingParams.create(**options)
        ids = self.encode(prompt)
        limit = self.scheduler.max_context
        if len(ids) >= limit:
            raise VkumdValueError(f"the prompt is {len(ids)} tokens; the context holds "
                                  f"{limit} and must leave room for a generated token "
                                  "(shorten the prompt or load with a larger max_context)")
        return self.scheduler.submit(ids, params)

    def generate(self, prompt: str, max_new_tokens: int = 128, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, repetition_penalty: float = 1.0,
                 seed: int | None = None, stop: str | Sequence[str] | None = None,
                 stream: bool = False) -> str | Iterator[str]:
        """Continue ``prompt``.

        Args:
            prompt: the text to continue.
            max_new_tokens: the most tokens to generate.
            temperature: 0 is greedy (deterministic); above 0 samples.
            top_k: sample among the k most likely tokens (0: all).
            top_p: sample within the nucleus of this much probability (1: all).
            repetition_penalty: > 1 discourages tokens already in the prompt or the text.
            seed: the sampling seed (the same seed gives the same text).
            stop: a string or strings that end the text (not included in it).
            stream: return an iterator of text pieces as they are generated.

        Returns:
            The generated text, or (``stream``) an iterator of its pieces; their join is
            the same text. :attr:`last_stats` is set once the text is complete.

        Raises:
            VkumdTypeError, VkumdValueError: a bad parameter (see
                :meth:`SamplingParams.create`) or a prompt longer than the context.
        """
        options = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                       top_p=top_p, repetition_penalty=repetition_penalty, seed=seed,
                       stop=stop)
        handle = self._submit(prompt, options)
        if stream:
            return self._stream([handle])
        text = handle.result()
        self._record([handle])
        return text

    def chat(self, messages: Sequence[dict[str, str]], **options: Any) -> str | Iterator[str]:
        """The assistant's reply to ``messages`` (``[{"role": "user", "content": ...}]``),
        through the model's chat template; ``options`` as for :meth:`generate`.

        Raises:
            VkumdTypeError, VkumdValueError: bad messages or options.
        """
        return self.generate(self.render_chat(messages), **options)

    def generate_batch(self, prompts: Sequence[str], **options: Any) -> list[str]:
        """Continue every prompt, decoding them together (as many at a time as the model has
        slots); ``options`` as for :meth:`generate` (without ``stream``), the same for each.
        A ``seed`` gives every prompt the same seed.

        Raises:
            VkumdTypeError, VkumdValueError: a bad prompt or option; nothing runs then.
        """
        if isinstance(prompts, str) or not isinstance(prompts, Sequence):
            raise VkumdTypeError("generate_batch: prompts must be a list of str")
        if "stream" in options:
            raise VkumdTypeError("generate_batch has no stream option; use generate")
        SamplingParams.create(**options)
        for prompt in prompts:  # every prompt checked before any runs
            self.encode(prompt)
        handles = []
        try:
            for prompt in prompts:
                handles.append(self._submit(prompt, options))
            texts = [handle.result() for handle in handles]
        finally:
            for handle in handles:
                handle.cancel()
        self._record(handles)
        return texts

    def _stream(self, handles: list[Handle]) -> Iterator[str]:
        try:
            yield from handles[0]
        finally:
            handles[0].cancel()  # a stream dropped mid-way frees its slot
            self._record(handles)

    def _record(self, handles: list[Handle]) -> None:
        prompt = sum(len(h.prompt_ids) for h in handles)
        generated = sum(len(h.tokens) for h in handles)
        prefill = sum(h.prefill_seconds for h in handles)
        decode = max((h.decode_seconds for h in handles), default=0.0)
        decoded = sum(h.decode_steps for h in handles)
        self.last_stats = {
            "prompt_tokens": prompt, "generated_tokens": generated, "decoded_tokens": decoded,
            "prefill_seconds": prefill, "decode_seconds": decode,
            "prefill_tokens_per_s": prompt / prefill if prefill > 0 else 0.0,
            "decode_tokens_per_s": decoded / decode if decode > 0 else 0.0,
            "finish_reasons": [h.finish_reason for h in handles],
        }

    # -- lifetime ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise VkumdValueError("this TextGenerator is closed; load the model again")

    def close(self) -> None:
        """Cancel running requests, free the model, and the context when the generator made
        it. Safe twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self.scheduler.close()
            close = getattr(self.runner, "close", None)
            if close is not None:
                close()
        finally:
            if self._owns_context and self.context is not None:
                self.context.close()

    def __enter__(self) -> TextGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
