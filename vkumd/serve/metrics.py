"""Prometheus metrics of one server (a registry of its own, so two apps in one process, as in
tests, do not share counters). Names are listed in docs/serving.md, "Metrics"."""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0)
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


class Metrics:
    """The server's counters, gauges and histograms.

    Attributes:
        registry: the prometheus registry they live in (served by :meth:`render`).
    """

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("vkumd_serve_requests", "HTTP requests answered, by route "
                                "and status", ["route", "status"], registry=r)
        self.request_seconds = Histogram("vkumd_serve_request_seconds", "Time from a "
                                         "request's arrival to its answer, by route",
                                         ["route"], buckets=_LATENCY, registry=r)
        self.queue_seconds = Histogram("vkumd_serve_queue_seconds", "Time an input waited "
                                       "in the queue before its batch started",
                                       buckets=_LATENCY, registry=r)
        self.tokenize_seconds = Histogram("vkumd_serve_tokenize_seconds", "Time to tokenize "
                                          "one request's texts", buckets=_LATENCY,
                                          registry=r)
        self.inference_seconds = Histogram("vkumd_serve_inference_seconds", "Time one device "
                                           "batch took, upload to read-back",
                                           buckets=_LATENCY, registry=r)
        self.batch_size = Histogram("vkumd_serve_batch_size", "Inputs per device batch",
                                    buckets=_SIZES, registry=r)
        self.batches = Counter("vkumd_serve_batches", "Device batches run", registry=r)
        self.tokens = Counter("vkumd_serve_tokens", "Real tokens computed", registry=r)
        self.padded_tokens = Counter("vkumd_serve_padded_tokens", "Tokens computed including "
                                     "padding (rows times the batch's longest input)",
                                     registry=r)
        self.inputs = Counter("vkumd_serve_inputs", "Inputs embedded", registry=r)
        self.queue_depth = Gauge("vkumd_serve_queue_depth", "Inputs waiting for a batch",
                                 registry=r)
        self.rejected = Counter("vkumd_serve_rejected", "Requests refused before queueing, "
                                "by reason", ["reason"], registry=r)
        self.dropped = Counter("vkumd_serve_dropped_inputs", "Queued inputs dropped "
                               "uncomputed because their request had gone", registry=r)
        self.timed_out = Counter("vkumd_serve_timed_out_inputs", "Queued inputs dropped "
                                 "uncomputed because they waited past the queue timeout",
                                 registry=r)
        self.failed_batches = Counter("vkumd_serve_failed_batches", "Device batches that "
                                      "raised", registry=r)
        self.generated_tokens = Counter("vkumd_serve_generated_tokens", "Tokens generated "
                                        "(completion tokens, as in responses' usage)",
                                        registry=r)
        self.prompt_tokens = Counter("vkumd_serve_prompt_tokens", "Prompt tokens of the "
                                     "sequences that started generating", registry=r)
        self.first_token_seconds = Histogram("vkumd_serve_time_to_first_token_seconds",
                                             "Time from a generation request's arrival "
                                             "to its first token", buckets=_LATENCY,
                                             registry=r)
        self.step_seconds = Histogram("vkumd_serve_decode_step_seconds", "Time one "
                                      "scheduler step took (prefills joining and one "
                                      "decode of every active sequence)", buckets=_LATENCY,
                                      registry=r)
        self.step_sequences = Histogram("vkumd_serve_decode_batch_size", "Sequences decoded "
                                        "together in one step", buckets=_SIZES, registry=r)
        self.active_sequences = Gauge("vkumd_serve_active_sequences", "Sequences holding a "
                                      "slot (generating)", registry=r)
        self.waiting_sequences = Gauge("vkumd_serve_waiting_sequences", "Sequences waiting "
                                       "for a free slot", registry=r)
        self.sequences = Counter("vkumd_serve_sequences", "Generation requests ended, by "
                                 "how: stop, length, cancelled (client gone), error, "
                                 "timeout", ["finish"], registry=r)
        self.ready = Gauge("vkumd_serve_ready", "1 once warm-up is done and /health is 200",
                           registry=r)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
