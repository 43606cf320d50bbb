"""The body of the Ray Serve test, run by test_ray_serve.py inside a network and PID namespace
it made (only ``lo``): a one-node Ray cluster on loopback, the server deployed on it with
small backpressure limits, requests through Ray Serve's HTTP proxy with the official client,
then an overload. Prints a JSON report and stops every process it started by PID."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np
import ray
from ray import serve

from vkumd.distributed import node_resources
from vkumd.models import SentenceEncoder
from vkumd.serve import ServeConfig
from vkumd.serve.ray_serve import PROXY_CALLBACK, deployment
from vkumd.testing.netns import descendants, refuse_outside, stop_by_pid

MODEL = "all-MiniLM-L6-v2"
PORT = 8765  # inside the test's own network namespace: nothing else listens there
TEXTS = [f"sentence {i} about {w}" for i, w in enumerate(["rivers", "tea", "trains"] * 4)]


def call(path: str, payload: object | None = None) -> tuple[int, dict[str, str], bytes]:
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()
    except (urllib.error.URLError, ConnectionError) as exc:
        return 0, {}, str(exc).encode()


def _print_replica_logs(temp: str) -> None:
    """The end of each Serve replica's and proxy's log, on stderr (the session is deleted)."""
    from pathlib import Path

    for log in sorted(Path(temp).glob("session_*/logs/serve/*.log")):
        if "replica" in log.name or "proxy" in log.name or "controller" in log.name:
            print(f"--- {log.name}\n{log.read_text(errors='replace')[-2500:]}", file=sys.stderr)


def main() -> int:
    refuse_outside(["lo"])  # on the host Ray would bind to the machine's own address
    assert os.environ.get("RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH") == PROXY_CALLBACK
    temp = tempfile.mkdtemp(prefix="vkrs", dir="/tmp")
    started: set[int] = set()
    report: dict[str, object] = {}
    t0 = time.perf_counter()
    try:
        ray.init(num_cpus=2, resources=node_resources(), include_dashboard=False,
                 _temp_dir=temp, _node_ip_address="127.0.0.1", log_to_driver=False)
        serve.start(http_options={"host": "127.0.0.1", "port": PORT})
        config = ServeConfig(model=MODEL, max_batch_size=8, max_batch_tokens=1024)
        app = deployment(config, max_ongoing_requests=2, max_queued_requests=2,
                         retry_after_s=2)
        serve.run(app, name="vkumd", route_prefix="/", blocking=False)
        started |= descendants()
        deadline = time.monotonic() + 180
        while call("/health")[0] != 200:
            assert time.monotonic() < deadline, call("/health")
            time.sleep(0.5)
        report["ready_s"] = time.perf_counter() - t0
        started |= descendants()

        from openai import OpenAI

        client = OpenAI(base_url=f"http://127.0.0.1:{PORT}/v1", api_key="none", max_retries=0)
        got = client.embeddings.create(model=MODEL, input=TEXTS)
        as_float = client.embeddings.create(model=MODEL, input=TEXTS[:2],
                                            encoding_format="float")
        with SentenceEncoder.from_pretrained(MODEL) as enc:
            want = enc.encode(TEXTS, progress=False)
        rows = np.array([d.embedding for d in got.data], np.float32)
        report.update(indices=[d.index for d in got.data], model=got.model,
                      max_diff=float(np.abs(rows - want).max()),
                      float_diff=float(np.abs(np.array([d.embedding for d in as_float.data],
                                                       np.float32) - want[:2]).max()),
                      models=json.loads(call("/v1/models")[2])["data"][0]["id"],
                      not_found=json.loads(call("/v1/nope", {})[2]))

        # Overload: 24 requests of 64 inputs at once against 2 ongoing + 2 queued.
        body = {"model": MODEL, "input": [f"{i} " + TEXTS[i % len(TEXTS)] for i in range(64)]}
        with concurrent.futures.ThreadPoolExecutor(24) as pool:
            answers = list(pool.map(lambda _: call("/v1/embeddings", body), range(24)))
        statuses = [a[0] for a in answers]
        refused = [a for a in answers if a[0] == 429]
        report["statuses"] = sorted(statuses)
        if refused:
            _, headers, raw = refused[0]
            report["refusal"] = {"retry_after": headers.get("Retry-After")
                                 or headers.get("retry-after"), "body": json.loads(raw)}
        ok = [json.loads(a[2]) for a in answers if a[0] == 200]
        report["ok_rows"] = sorted({len(o["data"]) for o in ok})
        report["after"] = call("/health")[0]
        report["total_s"] = time.perf_counter() - t0
    except BaseException:
        _print_replica_logs(temp)
        raise
    finally:
        started |= descendants()
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            report["stopped_after_shutdown"] = stop_by_pid(started)
            shutil.rmtree(temp, ignore_errors=True)
    print("REPORT " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
