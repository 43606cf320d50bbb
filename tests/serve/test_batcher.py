"""The batcher, the settings and the request checks, without a device or a server: batch
selection under both policies, the queue limit's 429, a failing batch failing only its
requests, inputs of a request that has gone being dropped."""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import threading
import time

import numpy as np
import pytest

pytest.importorskip("prometheus_client", reason="the serve extra is not installed: "
                    "pip install -e '.[serve]'")

from vkumd.errors import VkumdValueError  # noqa: E402
from vkumd.serve import api, config  # noqa: E402
from vkumd.serve.batcher import Batcher, select_batch  # noqa: E402
from vkumd.serve.errors import ApiError  # noqa: E402
from vkumd.serve.metrics import Metrics  # noqa: E402


def pick(lengths, waited=None, policy="sorted", max_tokens=64, max_batch=8, window=100,
         max_wait=1.0):
    waited = waited or [0.0] * len(lengths)
    return select_batch(lengths, waited, policy=policy, max_tokens=max_tokens,
                        max_batch=max_batch, window=window, max_wait=max_wait)


def test_fifo_takes_arrival_order_up_to_the_real_token_budget() -> None:
    assert pick([10, 50, 3, 3], policy="fifo", max_tokens=60) == [0, 1]
    assert pick([10, 50, 3, 3], policy="fifo", max_tokens=70) == [0, 1, 2, 3]
    assert pick([100, 1], policy="fifo", max_tokens=60) == [0]  # one over the budget alone
    assert pick([1] * 20, policy="fifo", max_batch=8) == list(range(8))


def test_sorted_groups_similar_lengths_under_the_padded_budget() -> None:
    lengths = [5, 60, 6, 61, 5, 59]
    assert pick(lengths, max_tokens=150) == [1, 3]  # 2 x 61 padded tokens; a third is 183
    assert pick(lengths, max_tokens=1000) == [1, 3, 5]  # 6 would be padded to 61
    assert pick([5, 6, 5], max_tokens=1000) == [0, 1, 2]
    assert pick([40, 20, 60], max_tokens=1000) == [0, 2]  # 20 + 32 < 60: not padded to it


def test_sorted_counts_padding_over_the_whole_batch() -> None:
    # Each 12 is within 32 tokens of 24, but 13 of them padded to 24 would double the work:
    # the padding is paid in every row, so it is bounded for the batch, not per input.
    lengths = [24] + [12] * 13
    chosen = pick(lengths, max_tokens=1000, max_batch=64)
    assert chosen == [0, 1, 2]  # 24 padding tokens in all; a third 12 makes 36 (> 32)
    assert pick(lengths[1:], max_tokens=1000, max_batch=64) == list(range(13))  # no padding
    rng = np.random.default_rng(1)
    queue = [int(n) for n in rng.integers(10, 26, 40)]
    while queue:
        chosen = pick(queue, max_tokens=4096, max_batch=64)
        real = sum(queue[i] for i in chosen)
        padded = len(chosen) * max(queue[i] for i in chosen)
        assert padded - real <= max(32, real // 4), (chosen, [queue[i] for i in chosen])
        queue = [n for i, n in enumerate(queue) if i not in chosen]


def test_sorted_padding_beats_fifo_on_a_mixed_queue() -> None:
    rng = np.random.default_rng(0)
    lengths = [int(n) for n in np.where(rng.random(400) < 0.1, 200, rng.integers(8, 20, 400))]

    def padded(policy: str) -> tuple[int, int]:
        queue, pad, batches = list(lengths), 0, 0
        while queue:
            chosen = pick(queue, policy=policy, max_tokens=2048, max_batch=32, window=256)
            pad += len(chosen) * max(queue[i] for i in chosen)
            queue = [n for i, n in enumerate(queue) if i not in chosen]
            batches += 1
        return pad, batches

    real = sum(lengths)
    sorted_pad, _ = padded("sorted")
    fifo_pad, _ = padded("fifo")
    assert sorted_pad / real < 1.3 < fifo_pad / real, (sorted_pad / real, fifo_pad / real)


def test_an_input_past_max_wait_anchors_the_next_batch() -> None:
    lengths = [5, 30, 31]
    assert 0 not in pick(lengths, [0.5, 0.1, 0.0], max_tokens=64)
    assert 0 in pick(lengths, [1.5, 0.1, 0.0], max_tokens=64)


def test_the_window_bounds_what_sorting_sees() -> None:
    assert pick([5, 5, 5, 200], window=3, max_tokens=1000) == [0, 1, 2]


def wait_until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def fake_batcher(run, max_queue=8, max_batch=4, queue_timeout=0.0) -> Batcher:
    b = Batcher(Metrics(), policy="sorted", max_tokens=1000, max_batch=max_batch, window=64,
                max_wait=0.05, max_queue=max_queue, queue_timeout=queue_timeout)
    b.start(lambda: (run, 2), lambda: None, lambda exc: None, lambda: None)
    wait_until(lambda: hasattr(b, "hidden"))
    return b


def test_results_come_back_in_input_order() -> None:
    def run(seqs, normalize):
        return np.array([[len(s), float(flag)] for s, flag in zip(seqs, normalize, strict=True)],
                        np.float32)

    b = fake_batcher(run, max_queue=64)
    seqs = [[1] * n for n in (3, 9, 1, 7, 5, 2)]
    out = b.submit(seqs, False).result(10)
    assert out[:, 0].tolist() == [3, 9, 1, 7, 5, 2] and not out[:, 1].any()
    b.stop()


def test_queue_limit_answers_429_with_retry_after() -> None:
    gate = threading.Event()

    def run(seqs, normalize):
        gate.wait(10)
        return np.zeros((len(seqs), 2), np.float32)

    b = fake_batcher(run, max_queue=8)
    first = b.submit([[1]] * 4, True)  # taken by the worker, which blocks on the gate
    wait_until(lambda: b.queued() == 0)
    second = b.submit([[1]] * 8, True)  # queued: the queue is full now
    with pytest.raises(ApiError) as caught:
        b.submit([[1]], True)
    assert caught.value.status == 429 and int(caught.value.headers["Retry-After"]) >= 1
    assert b.metrics.rejected.labels("queue_full")._value.get() == 1
    gate.set()
    assert first.result(10).shape == (4, 2) and second.result(10).shape == (8, 2)
    b.stop()


def test_a_failing_batch_fails_only_its_requests() -> None:
    def run(seqs, normalize):
        if any(len(s) == 13 for s in seqs):
            raise MemoryError("pool exhausted")
        return np.ones((len(seqs), 2), np.float32)

    b = fake_batcher(run, max_queue=64, max_batch=1)
    bad = b.submit([[1] * 13], True)
    good = b.submit([[1] * 3], True)
    with pytest.raises(ApiError) as caught:
        bad.result(10)
    assert caught.value.status == 503 and caught.value.code == "device_out_of_memory"
    assert good.result(10).shape == (1, 2)
    b.stop()


def test_inputs_of_a_request_that_went_away_are_dropped() -> None:
    gate = threading.Event()
    ran: list[int] = []

    def run(seqs, normalize):
        gate.wait(10)
        ran.append(len(seqs))
        return np.zeros((len(seqs), 2), np.float32)

    b = fake_batcher(run, max_queue=64, max_batch=2)
    first = b.submit([[1], [1]], True)
    gone = b.submit([[2]] * 6, True)
    assert gone.cancel()
    gate.set()
    first.result(10)
    b.stop()
    assert sum(ran) == 2 and b.metrics.dropped._value.get() == 6
    with pytest.raises(concurrent.futures.CancelledError):
        gone.result(0)


def test_a_request_queued_past_the_timeout_gets_503() -> None:
    gate = threading.Event()

    def run(seqs, normalize):
        gate.wait(10)
        return np.zeros((len(seqs), 2), np.float32)

    b = fake_batcher(run, max_queue=64, max_batch=1, queue_timeout=0.2)
    first = b.submit([[1]], True)
    wait_until(lambda: b.queued() == 0)  # the worker holds it
    late = b.submit([[1], [2]], True)
    time.sleep(0.3)
    gate.set()
    assert first.result(10).shape == (1, 2)
    with pytest.raises(ApiError) as caught:
        late.result(10)
    assert caught.value.status == 503 and caught.value.code == "queue_timeout"
    assert "Retry-After" in caught.value.headers
    assert b.metrics.timed_out._value.get() == 2
    b.stop()


def test_every_flag_has_its_variable(tmp_path) -> None:
    parser = argparse.ArgumentParser()
    keys = tmp_path / "keys"
    keys.write_text("# comment\nfile-key\n\n")
    config.add_arguments(parser, {"VKUMD_SERVE_PORT": "9001", "VKUMD_SERVE_API_KEYS": "a,b",
                                  "VKUMD_SERVE_AUTO_TRUNCATE": "yes",
                                  "VKUMD_SERVE_API_KEY_FILE": str(keys)})
    settings = config.from_args(parser.parse_args([]))
    assert settings.port == 9001 and settings.auto_truncate and settings.host == "127.0.0.1"
    assert settings.keys() == {"a", "b", "file-key"}
    assert config.from_args(parser.parse_args(["--api-key", "c"])).keys() == {"c", "file-key"}
    envs = [f.env for f in config.FLAGS]
    assert len(set(envs)) == len(envs) and all(e.startswith("VKUMD_SERVE_") for e in envs)
    help_text = parser.format_help()
    assert all(f.env in help_text for f in config.FLAGS)
    assert "hidden" in help_text and "a,b" not in help_text  # keys are never printed


@pytest.mark.parametrize("env, value", [("VKUMD_SERVE_PORT", "http"),
                                        ("VKUMD_SERVE_AUTO_TRUNCATE", "maybe")])
def test_a_bad_variable_is_refused_by_name(env: str, value: str) -> None:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser, {env: value})
    with pytest.raises(VkumdValueError, match=env):
        config.from_args(parser.parse_args([]))


@pytest.mark.parametrize("change", [{"batch_policy": "lifo"}, {"max_batch_size": 0},
                                    {"max_queue": 10, "max_inputs": 20}, {"max_wait_ms": -1},
                                    {"queue_timeout_s": -1}])
def test_bad_settings_are_refused(change: dict) -> None:
    with pytest.raises(VkumdValueError):
        config.ServeConfig(**change).check()


def test_base64_rows_are_the_float_rows_bits() -> None:
    rows = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    floats = api.embeddings_response(rows, "m", "float", 7)
    packed = api.embeddings_response(rows, "m", "base64", 7)
    back = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), "<f4")
                     for d in packed["data"]])
    again = np.array([d["embedding"] for d in floats["data"]], np.float32)
    assert back.tobytes() == rows.tobytes() == again.tobytes()
    assert floats["usage"] == {"prompt_tokens": 7, "total_tokens": 7}


def test_input_forms() -> None:
    assert api.parse_input("a", 4).texts == ["a"]
    assert api.parse_input(["a", "b"], 4).texts == ["a", "b"]
    assert api.parse_input([1, 2, 3], 2).ids == [[1, 2, 3]]  # one array, not 3 inputs
    assert api.parse_input([[1], [2, 3]], 4).ids == [[1], [2, 3]]
    with pytest.raises(ApiError, match="at most 4"):
        api.parse_input(["a"] * 5, 4)


def test_serve_help_and_a_missing_extra(monkeypatch, capsys) -> None:
    import importlib.util

    from vkumd import cli
    from vkumd.serve import cli as serve_cli

    with pytest.raises(SystemExit) as done:
        cli.main(["serve", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--batch-policy" in out and "VKUMD_SERVE_MAX_QUEUE" in out
    real = importlib.util.find_spec
    monkeypatch.setattr(serve_cli.importlib.util, "find_spec",
                        lambda name, *a: None if name == "uvicorn" else real(name, *a))
    assert cli.main(["serve"]) == 2
    assert "pip install 'vkumd[serve]'" in capsys.readouterr().err
