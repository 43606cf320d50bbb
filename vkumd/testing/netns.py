"""Private network namespaces for the Ray tests and benchmarks, and stopping what ran there.

Ray binds to the machine's non-loopback address and probes a public DNS server to find it,
so the tests and ``bench/scale.py`` never run Ray in the host's network namespace:

- one node: :func:`loopback_command` wraps a command in ``unshare --net --pid --fork
  --kill-child --mount-proc`` with only ``lo`` up and a private ``/tmp/ray``;
- two nodes: :func:`veth_pair` creates two named namespaces joined by a veth pair on a
  private /30 that the host does not use (``10.211.N.0/30``), and removes both in a
  ``finally``; :func:`namespace_command` runs a command inside one of them, in a PID
  namespace of its own, with a private ``/tmp/ray`` (two Ray nodes on one machine must not
  share a session directory).

Neither namespace has a default route, so nothing sent there can reach another address.
Processes are stopped by PID (:func:`stop_by_pid`, :func:`end`), never by name. Needs root,
``ip`` and ``unshare``; :func:`unavailable` says why not where they are missing.
"""

from __future__ import annotations

import ipaddress
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from vkumd.errors import VkumdError

PID_NAMESPACE = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
SUBNET_PREFIX = "10.211"


def unavailable() -> str | None:
    """Why namespaces cannot be made here (not root, ``ip``/``unshare`` missing), or None."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip is missing: Ray runs here only inside namespaces of its own"
    probe = subprocess.run(["unshare", "--net", "--pid", "--fork", "--kill-child",
                            "--mount-proc", "ip", "link", "set", "lo", "up"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"cannot make a network and PID namespace here: {probe.stderr.strip()}"
    return None


# A tmpfs on /tmp/ray in the command's own mount namespace: Ray keeps its session (sockets,
# logs, the "session_latest" link) there, which other jobs on the host (or the other test
# node) may use too. Only /tmp/ray: a tmpfs on all of /tmp would hide a checkout or a
# virtual environment that lives under /tmp (a CI clone does). The mount point itself is an
# empty directory left on the host.
PRIVATE_TMP = ("mkdir -p /tmp/ray && mount -t tmpfs vkumd-ray /tmp/ray && "
               "export TMPDIR=/tmp RAY_TMPDIR=/tmp")


def loopback_command(argv: Sequence[str]) -> list[str]:
    """``argv`` in new network and PID namespaces whose only interface is ``lo`` (up), with a
    private ``/tmp/ray``."""
    return ["unshare", "--net", *PID_NAMESPACE[1:], "sh", "-c",
            f'ip link set lo up && {PRIVATE_TMP} && exec "$@"', "sh", *argv]


def namespace_command(namespace: str, argv: Sequence[str]) -> list[str]:
    """``argv`` inside the named network namespace, in a PID namespace of its own (ending
    its first process ends every process left inside) and with a private ``/tmp/ray``."""
    return ["ip", "netns", "exec", namespace, *PID_NAMESPACE, "sh", "-c",
            f'{PRIVATE_TMP} && exec "$@"', "sh", *argv]


def interfaces() -> list[str]:
    """The network interfaces of this process's namespace (``/proc/self/net`` follows the
    namespace; ``/sys/class/net`` does not unless sysfs is mounted again)."""
    lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":", 1)[0].strip() for line in lines)


def refuse_outside(allowed: Sequence[str] = ("lo",)) -> None:
    """Exit unless this process's namespace has exactly the ``allowed`` interfaces.

    A Ray job calls this first: on the host it would bind to the machine's own address.
    """
    found = interfaces()
    if found != sorted(allowed):
        raise SystemExit(f"this job must run inside a private network namespace with only "
                         f"{sorted(allowed)}; this one has {found}")


def host_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks of the host's addresses and routes (``ip -4 addr``, ``ip -4 route``)."""
    found = []
    addresses = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                               text=True, check=True).stdout
    for line in addresses.splitlines():
        words = line.split()
        if "inet" in words:
            found.append(ipaddress.ip_interface(words[words.index("inet") + 1]).network)
    routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True,
                            text=True, check=True).stdout
    for line in routes.splitlines():
        words = line.split()
        if words and words[0] in ("local", "broadcast", "unicast"):
            words = words[1:]
        if words and words[0] != "default":
            try:
                found.append(ipaddress.ip_network(words[0], strict=False))
            except ValueError:
                continue  # not a destination (e.g. a route type we did not strip)
    return found


def free_subnet(seed: int | None = None) -> ipaddress.IPv4Network:
    """A ``10.211.N.0/30`` that overlaps none of the host's networks.

    Args:
        seed: where to start looking (default: this PID), so concurrent runs rarely pick
            the same one (they could share it anyway: each pair lives in its own namespaces).

    Raises:
        VkumdError: all 256 are taken.
    """
    used = host_networks()
    start = os.getpid() if seed is None else seed
    for step in range(256):
        subnet = ipaddress.ip_network(f"{SUBNET_PREFIX}.{(start + step) % 256}.0/30")
        if not any(subnet.overlaps(net) for net in used):
            return subnet
    raise VkumdError(f"every {SUBNET_PREFIX}.N.0/30 overlaps a host network")


@dataclass(frozen=True)
class VethPair:
    """Two network namespaces joined by one veth pair: names, interfaces, addresses."""

    namespaces: tuple[str, str]
    links: tuple[str, str]
    addresses: tuple[str, str]
    subnet: str


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise VkumdError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


def leftovers(pair: VethPair) -> list[str]:
    """The pair's namespaces and links the host still lists (empty once removed)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = {line.split()[0] for line in listed.splitlines() if line.strip()}
    left = [ns for ns in pair.namespaces if ns in names]
    for link in pair.links:
        if subprocess.run(["ip", "link", "show", link], capture_output=True).returncode == 0:
            left.append(link)
    return left


def remove(pair: VethPair) -> list[str]:
    """Delete the pair's namespaces (their veth ends go with them) and any link that was
    left in the host's namespace; return what is still listed afterwards."""
    for ns in pair.namespaces:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=30)
    for link in pair.links:
        subprocess.run(["ip", "link", "delete", link], capture_output=True, timeout=30)
    return leftovers(pair)


@contextmanager
def veth_pair(tag: str | None = None) -> Iterator[VethPair]:
    """Create two namespaces joined by a veth pair on a free /30; remove them afterwards.

    Both ends are created straight inside their namespaces, so the host's namespace never
    holds them; each namespace gets ``lo`` and its end up, with no default route.

    Args:
        tag: part of the names (default: this PID); at most 8 characters.

    Raises:
        VkumdError: a step failed (what was made is removed first), or something was still
            listed after removal.
    """
    tag = tag or str(os.getpid())
    subnet = free_subnet()
    first, second = (str(host) for host in list(subnet.hosts())[:2])
    pair = VethPair((f"vkumd-{tag}-a", f"vkumd-{tag}-b"), (f"vk{tag}a", f"vk{tag}b"),
                    (first, second), str(subnet))
    try:
        for ns in pair.namespaces:
            _ip("netns", "add", ns)
        _ip("link", "add", pair.links[0], "netns", pair.namespaces[0], "type", "veth",
            "peer", "name", pair.links[1], "netns", pair.namespaces[1])
        for ns, link, address in zip(pair.namespaces, pair.links, pair.addresses,
                                     strict=True):
            _ip("-n", ns, "addr", "add", f"{address}/{subnet.prefixlen}", "dev", link)
            _ip("-n", ns, "link", "set", link, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield pair
    finally:
        left = remove(pair)
        if left:
            raise VkumdError(f"could not remove {left}; delete them with ip netns delete / "
                             "ip link delete")


def read_line(proc: subprocess.Popen[str], prefix: str, timeout_s: float) -> str:
    """The first line of ``proc``'s stdout starting with ``prefix``, without the prefix.

    Raises:
        VkumdError: the process ended, or ``timeout_s`` passed, before such a line.
    """
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not sel.select(timeout=left):
                continue
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith(prefix):
                return line[len(prefix):].strip()
    raise VkumdError(f"no {prefix!r} line from process {proc.pid} (rc {proc.poll()}) "
                     f"within {timeout_s:.0f} s")


def end(proc: subprocess.Popen[str] | subprocess.Popen[bytes], grace_s: float = 10.0) -> int:
    """Stop one process we started, by its PID: SIGTERM, SIGKILL after ``grace_s``.

    With :data:`PID_NAMESPACE` in front of a command, ending that first process makes the
    kernel end everything still running in its PID namespace.
    """
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def descendants() -> set[int]:
    """PIDs of every process below this one, read from /proc (ppid is field 4 of stat)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


def namespace_cpu_seconds() -> float:
    """CPU seconds (user + system) of every process this process can see in ``/proc``.

    Inside a PID namespace with its own ``/proc`` (:data:`PID_NAMESPACE`) that is every process
    of the namespace: a Ray node's daemons, workers and driver. A process that has ended
    no longer counts.
    """
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / tick


def stop_by_pid(pids: set[int], grace_s: float = 10.0) -> list[int]:
    """SIGTERM, then SIGKILL after up to ``grace_s``, those of ``pids`` still running; return
    the ones that were running."""
    def running() -> list[int]:
        alive = []
        for pid in pids:
            try:
                status = Path(f"/proc/{pid}/status").read_text(errors="ignore")
            except OSError:
                continue  # gone
            if "zombie" not in status:
                alive.append(pid)
        return alive

    def send(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass  # it ended between the look and the signal

    left = running()
    for pid in left:
        send(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while running() and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in running():
        send(pid, signal.SIGKILL)
    return left
