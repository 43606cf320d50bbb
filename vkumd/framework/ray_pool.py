"""Sentence embeddings over Ray actors, one context and one loaded model per actor.

Each node declares ``{"vulkan_gpu": N}`` (:func:`node_resources`, from :func:`vkumd.devices`)
and every :class:`EncoderActor` takes one unit of it, so Ray places one actor per device.
:func:`iter_embed` cuts a corpus into batches and runs them through Ray's ``ActorPool``;
results come back in input order; when an actor dies its unfinished batch is run again on
one that lives. Ray is imported only when these are called (the ``ray`` extra).
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from vkumd.errors import VkumdError, VkumdValueError
from vkumd.framework.context import Context
from vkumd.framework.models.encoder import SentenceEncoder, check_sentences
from vkumd.framework.models.loader import DEFAULT_MODEL
from vkumd.runtime.context import devices

RESOURCE = "vulkan_gpu"
# How long to wait for a busy actor to answer "are you alive" after another one died.
PING_TIMEOUT_S = 120.0


def ray_module() -> Any:
    """Import Ray, or say how to install it.

    Raises:
        VkumdError: Ray is not installed.
    """
    try:
        import ray
    except ImportError:
        raise VkumdError("Ray is not installed; pip install 'vkumd[ray]' (or 'ray==2.*')"
                         ) from None
    return ray


def node_resources(slots_per_device: int = 1) -> dict[str, float]:
    """The custom resource a node declares: ``{"vulkan_gpu": devices × slots}``.

    Pass it to ``ray.init(resources=...)`` or ``ray start --resources``. ``slots_per_device``
    above 1 lets several actors share a device (each with its own context).
    """
    if isinstance(slots_per_device, bool) or not isinstance(slots_per_device, int) \
            or slots_per_device < 1:
        raise VkumdValueError(f"slots_per_device={slots_per_device!r}; give an int >= 1")
    return {RESOURCE: float(len(devices()) * slots_per_device)}


def claim_slot(node: str, directory: str | None = None, most: int = 1024) -> tuple[int, Any]:
    """The lowest slot number no live process on this machine holds for ``node``.

    Each slot is a lock file (``flock``) in ``directory`` (default: the temp dir); the open
    file returned holds the slot until it is closed or the process ends, so a dead actor's
    slot is free again for its replacement. Rank order cannot do this: Ray decides which
    ranks land on which node, and two ranks on one node could both pick device 0.

    Raises:
        VkumdError: all ``most`` slots are held.
    """
    import fcntl
    import tempfile

    base = directory or tempfile.gettempdir()
    for slot in range(most):
        handle = open(os.path.join(base, f"vkumd-{RESOURCE}-{node}-{slot}.lock"), "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return slot, handle
    raise VkumdError(f"all {most} {RESOURCE} slots of node {node} are held")


class EncoderActor:
    """One context and one :class:`SentenceEncoder`, living in a Ray worker.

    Args:
        model: model directory or installed name.
        rank: this actor's number in the job (reported by :meth:`info`).
        device: a device index or name; ``None`` claims the lowest free slot on this node
            (:func:`claim_slot`) and takes device ``slot % len(devices())``, so the actors
            Ray places on a node with several GPUs spread over them.
        dtype: ``"float32"`` or ``"float16"``.
    """

    def __init__(self, model: str = DEFAULT_MODEL, rank: int = 0, device: int | str | None = None,
                 dtype: str = "float32") -> None:
        self.rank = rank
        self._slot: Any = None
        if device is None:
            node = ray_module().get_runtime_context().get_node_id()
            slot, self._slot = claim_slot(node)
            device = slot % max(len(devices()), 1)
        self.context = Context(device=device)
        self.encoder = SentenceEncoder.from_pretrained(model, ctx=self.context, dtype=dtype)

    def encode(self, index: int, sentences: list[str], batch_size: int = 32
               ) -> tuple[int, np.ndarray]:
        """``(index, embeddings)``: the index comes back so results can be put in order."""
        return index, self.encoder.encode(sentences, batch_size=batch_size, progress=False)

    def info(self) -> dict[str, Any]:
        """Where this actor runs: process id, Ray node id and device."""
        return {"pid": os.getpid(), "node": ray_module().get_runtime_context().get_node_id(),
                "rank": self.rank, "device_index": self.context.caps.index,
                "device": self.context.caps.name, "driver": self.context.caps.driver_info}

    def cpu_seconds(self) -> float:
        """CPU time this actor's process has used (every thread, lavapipe's included)."""
        return time.process_time()

    def ping(self) -> bool:
        """Answers when the actor is alive (after its queued work)."""
        return True


@cache
def remote_class() -> Any:
    """:class:`EncoderActor` as a Ray actor class needing one ``vulkan_gpu``."""
    return ray_module().remote(resources={RESOURCE: 1})(EncoderActor)


def start_actors(num_actors: int | None = None, model: str = DEFAULT_MODEL,
                 dtype: str = "float32", timeout_s: float = 600.0) -> list[Any]:
    """Start actors and wait until each has loaded the model.

    Args:
        num_actors: how many; ``None`` takes every ``vulkan_gpu`` the cluster declares.
        model, dtype: as :class:`EncoderActor`.
        timeout_s: how long to wait for them to load.

    Raises:
        VkumdValueError: the cluster declares fewer ``vulkan_gpu`` than asked (or none).
    """
    ray = ray_module()
    declared = int(ray.cluster_resources().get(RESOURCE, 0))
    wanted = declared if num_actors is None else num_actors
    if wanted < 1 or wanted > declared:
        raise VkumdValueError(
            f"asked for {wanted} encoder actors but the cluster declares {declared} "
            f"{RESOURCE}; start each node with resources={node_resources()} "
            "(vkumd.distributed.node_resources) or ask for fewer")
    actors = [remote_class().remote(model, rank, None, dtype) for rank in range(wanted)]
    ray.get([a.ping.remote() for a in actors], timeout=timeout_s)
    return actors


@dataclass
class EmbedStats:
    """What a job did: sentences, wall seconds, throughput, batches run again, actors lost,
    and ``per_actor``: batches each actor (by position in the list given) finished."""

    sentences: int = 0
    seconds: float = 0.0
    batches: int = 0
    retried_batches: int = 0
    actors_lost: int = 0
    per_actor: list[int] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter, repr=False)

    @property
    def sentences_per_s(self) -> float:
        """Throughput over the whole job."""
        return self.sentences / self.seconds if self.seconds > 0 else 0.0


class EmbedStream:
    """Iterates over ``(start_row, embeddings)`` chunks of a corpus, in input order.

    Built by :func:`iter_embed`; :attr:`stats` fills in as chunks arrive.
    """

    def __init__(self, corpus: Sequence[str], actors: Sequence[Any], chunk_size: int,
                 batch_size: int) -> None:
        self.texts = check_sentences(corpus)
        if not actors:
            raise VkumdValueError("embed: no actors; start at least one")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise VkumdValueError(f"embed: chunk_size={chunk_size!r}; give an int >= 1")
        self.actors = list(actors)
        self.chunk_size, self.batch_size = chunk_size, batch_size
        self.stats = EmbedStats(batches=-(-len(self.texts) // chunk_size),
                                per_actor=[0] * len(self.actors))

    def _chunk(self, index: int) -> tuple[int, list[str]]:
        start = index * self.chunk_size
        return index, self.texts[start:start + self.chunk_size]

    def __iter__(self) -> Iterator[tuple[int, np.ndarray]]:
        ray = ray_module()
        from ray.util import ActorPool

        pool = ActorPool(self.actors)
        todo, done = deque(range(self.stats.batches)), {}
        running: dict[int, Any] = {}  # batch -> the actor it was given to
        next_out = 0

        def submit(actor: Any, index: int) -> Any:
            running[index] = actor
            return actor.encode.remote(*self._chunk(index), self.batch_size)

        while next_out < self.stats.batches:
            while todo and pool.has_free():
                pool.submit(submit, todo.popleft())
            if not pool.has_next():
                raise VkumdError(f"embed: every actor died ({self.stats.actors_lost} lost); "
                                 f"{self.stats.batches - next_out} batches were not embedded")
            try:
                index, rows = pool.get_next_unordered()
            except ray.exceptions.ActorDiedError:
                # The pool has dropped the dead actor; find which batches died with it and
                # queue them first, for the next free actor.
                lost = self._dead(ray, running)
                self.stats.actors_lost += len({id(running[i]) for i in lost})
                self.stats.retried_batches += len(lost)
                for i in sorted(lost, reverse=True):
                    del running[i]
                    todo.appendleft(i)
                continue
            finisher = running.pop(index, None)
            position = next((i for i, a in enumerate(self.actors) if a is finisher), None)
            if position is not None:
                self.stats.per_actor[position] += 1
            done[index] = rows
            while next_out in done:
                chunk = done.pop(next_out)
                self.stats.sentences += len(chunk)
                self.stats.seconds = time.perf_counter() - self.stats.started
                yield next_out * self.chunk_size, chunk
                next_out += 1

    @staticmethod
    def _dead(ray: Any, running: dict[int, Any]) -> list[int]:
        """The batches in ``running`` whose actor no longer answers."""
        lost = []
        for index, actor in running.items():
            try:
                ray.get(actor.ping.remote(), timeout=PING_TIMEOUT_S)
            except ray.exceptions.RayActorError:
                lost.append(index)
        return lost


def iter_embed(corpus: Sequence[str], actors: Sequence[Any], chunk_size: int = 64,
               batch_size: int = 32) -> EmbedStream:
    """Stream a corpus's embeddings from ``actors`` (see :class:`EmbedStream`)."""
    return EmbedStream(corpus, actors, chunk_size, batch_size)


@dataclass
class EmbedResult:
    """Embeddings ``(n, hidden)`` in input order, and the job's :class:`EmbedStats`."""

    embeddings: np.ndarray
    stats: EmbedStats


def embed(corpus: Sequence[str], model: str = DEFAULT_MODEL, num_actors: int | None = None,
          chunk_size: int = 64, batch_size: int = 32, dtype: str = "float32",
          address: str | None = None, actors: Sequence[Any] | None = None) -> EmbedResult:
    """Embed a corpus on Ray actors, one per ``vulkan_gpu``.

    Args:
        corpus: a list of str.
        model, dtype: what each actor loads.
        num_actors: actors to start; ``None``: every ``vulkan_gpu`` the cluster declares.
        chunk_size: sentences per task (the unit that is retried when an actor dies).
        batch_size: sentences per device batch inside an actor.
        address: a Ray cluster to join when Ray is not initialised yet (``"auto"``,
            ``"HOST:PORT"``); ``None`` starts a local one declaring this machine's devices.
        actors: running :class:`EncoderActor` handles to use instead of starting new ones
            (they are left running).

    Returns:
        :class:`EmbedResult`.

    Raises:
        VkumdError: Ray missing, or every actor died.
        VkumdValueError: the cluster declares too few ``vulkan_gpu``.
    """
    ray = ray_module()
    if not ray.is_initialized():
        if address is None:
            ray.init(resources=node_resources(), include_dashboard=False)
        else:
            ray.init(address=address)
    mine = actors is None
    used = start_actors(num_actors, model, dtype) if actors is None else list(actors)
    try:
        stream = iter_embed(corpus, used, chunk_size, batch_size)
        rows = [chunk for _, chunk in stream]
        width = rows[0].shape[1] if rows else 0
        out = np.concatenate(rows) if rows else np.empty((0, width), np.float32)
        return EmbedResult(out, stream.stats)
    finally:
        if mine:
            for actor in used:
                ray.kill(actor)
