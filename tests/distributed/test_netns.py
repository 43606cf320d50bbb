"""The namespace helpers the Ray tests and bench/scale.py share: a free private subnet,
a veth pair that is always removed, and the refusal to run Ray on the host's network."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys

import pytest

from vkumd.errors import VkumdError
from vkumd.testing import netns

REASON = netns.unavailable()
needs_namespaces = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def test_free_subnet_skips_the_host_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = [ipaddress.ip_network("10.211.5.0/24"), ipaddress.ip_network("10.211.6.0/29")]
    monkeypatch.setattr(netns, "host_networks", lambda: taken)
    assert str(netns.free_subnet(seed=5)) == "10.211.7.0/30"
    assert str(netns.free_subnet(seed=4)) == "10.211.4.0/30"
    monkeypatch.setattr(netns, "host_networks", lambda: [ipaddress.ip_network("10.0.0.0/8")])
    with pytest.raises(VkumdError, match="overlaps a host network"):
        netns.free_subnet()


def test_the_real_host_networks_are_avoided() -> None:
    subnet = netns.free_subnet()
    assert not any(subnet.overlaps(net) for net in netns.host_networks())


def test_refuse_outside_stops_on_the_host_namespace() -> None:
    if netns.interfaces() == ["lo"]:
        pytest.skip("this process already runs in a loopback-only namespace")
    with pytest.raises(SystemExit, match="private network namespace"):
        netns.refuse_outside(["lo"])


@needs_namespaces
def test_loopback_command_sees_only_lo() -> None:
    code = "from vkumd.testing import netns; netns.refuse_outside(['lo']); print('ok')"
    done = subprocess.run(netns.loopback_command([sys.executable, "-c", code]),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@needs_namespaces
def test_namespaced_commands_still_see_the_rest_of_tmp(tmp_path) -> None:
    # Only /tmp/ray is private: a checkout or a venv under /tmp (a CI clone) stays reachable.
    probe = tmp_path / "probe.txt"
    probe.write_text("seen")
    done = subprocess.run(netns.loopback_command(["cat", str(probe)]), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "seen", done.stderr


@needs_namespaces
def test_veth_pair_works_and_is_removed_even_on_failure() -> None:
    tag = f"t{os.getpid() % 10**6}"
    code = ("import socket, sys; from vkumd.testing import netns; "
            "print(netns.interfaces()); s = socket.create_connection((sys.argv[1], 9), 2)")
    with pytest.raises(RuntimeError, match="on purpose"):
        with netns.veth_pair(tag) as pair:
            assert pair.addresses[0] != pair.addresses[1]
            routes = subprocess.run(["ip", "-n", pair.namespaces[0], "route"],
                                    capture_output=True, text=True, check=True).stdout
            assert "default" not in routes and pair.subnet in routes
            # Inside namespace a: lo and its veth end; the peer answers (a refused
            # connection, port 9 has no listener), which proves the link is up.
            done = subprocess.run(
                netns.namespace_command(pair.namespaces[0],
                                        [sys.executable, "-c", code, pair.addresses[1]]),
                capture_output=True, text=True, timeout=60)
            assert str(sorted(["lo", pair.links[0]])) in done.stdout, done.stderr
            assert "ConnectionRefusedError" in done.stderr, done.stderr
            raise RuntimeError("on purpose")
    assert netns.leftovers(pair) == []
