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
        self.ready = Gauge("vkumd_serve_ready", "1 once warm-up is done and /health is 200",
                           registry=r)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
