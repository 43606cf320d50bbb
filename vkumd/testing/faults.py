"""Fault injection: make the Nth call of a Vulkan function fail, or lose the device.

Faults sit at the binding layer (:func:`vkumd.vk.binding.intercept`): every call vkumd makes
into Vulkan, through ``lib.vkX`` or the binding's ``vk.vkX(...)`` wrappers, reaches the
driver through one attribute of ``binding.lib``, and only the functions named by an armed
rule are put behind a gate. Nothing armed, nothing changes: the hot ``vkCmd*`` paths run as
they always do.

In a test::

    from vkumd.testing import faults

    with faults.inject("vkAllocateMemory", nth=3, result="VK_ERROR_OUT_OF_DEVICE_MEMORY"):
        ...  # the third vkAllocateMemory from here on returns that result
    with faults.lose_device("submit", nth=5):
        ...  # the fifth vkQueueSubmit loses the device (and it stays lost)

From the environment (armed when ``vkumd`` is imported), ``VKUMD_FAULTS`` holds rules
separated by commas::

    rules   = rule ("," rule)*
    rule    = site ":" nth [":" result]        the nth call of site fails with result
            | "device_lost:" site ":" nth      the nth call of site loses the device
    site    = a Vulkan entry point returning VkResult (vkAllocateMemory, vkQueueSubmit, ...)
            | "submit"                          vkQueueSubmit
            | "wait"                            vkWaitSemaphores and vkWaitForFences
    nth     = N                                 the Nth call (1-based, counted from arming)
            | N "+"                             the Nth and every later call
    result  = a VkResult name, with or without its VK_ / VK_ERROR_ prefix, or its number;
              default: VK_ERROR_OUT_OF_DEVICE_MEMORY for vkAllocateMemory,
              VK_ERROR_MEMORY_MAP_FAILED for vkMapMemory, else VK_ERROR_OUT_OF_HOST_MEMORY

e.g. ``VKUMD_FAULTS="vkAllocateMemory:3,vkQueueSubmit:1,device_lost:submit:5"``.

A failing call returns its result without reaching the driver. A lost device answers
``VK_ERROR_DEVICE_LOST`` from then on to every call that can report a loss (submits, waits,
status queries) made on it, until it is destroyed; other devices are untouched. The device of
a call is told by the loader's dispatch pointer, which a ``VkDevice`` shares with its queues
and command buffers. ``vkDeviceWaitIdle`` on a lost device still lets the real device finish
what it had, so closing the context destroys nothing the driver is still running.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vkumd import settings
from vkumd.errors import VkumdValueError
from vkumd.vk import binding
from vkumd.vk.binding import ffi, vk
from vkumd.vk.errors import result_code, result_name

__all__ = ["Rule", "arm", "arm_from_environment", "armed", "disarm", "inject", "lose_device",
           "parse"]

SITES: dict[str, tuple[str, ...]] = {
    "submit": ("vkQueueSubmit",),
    "wait": ("vkWaitSemaphores", "vkWaitForFences"),
}
"""Short site names and the entry points each stands for."""

LOSS_REPORTING = ("vkQueueSubmit", "vkQueueWaitIdle", "vkDeviceWaitIdle", "vkWaitSemaphores",
                  "vkWaitForFences", "vkGetFenceStatus", "vkGetSemaphoreCounterValue",
                  "vkGetQueryPoolResults")
"""Entry points that answer ``VK_ERROR_DEVICE_LOST`` once their device is lost."""

_DEFAULT_RESULT = {
    "vkAllocateMemory": vk.VK_ERROR_OUT_OF_DEVICE_MEMORY,
    "vkMapMemory": vk.VK_ERROR_MEMORY_MAP_FAILED,
}
_DEVICE_LOST = vk.VK_ERROR_DEVICE_LOST


@dataclass(eq=False)
class Rule:
    """One armed fault.

    Attributes:
        calls: the entry points whose calls are counted together.
        nth: the first call (1-based) that fails.
        times: how many calls fail from the nth on (``None``: all of them).
        result: the ``VkResult`` the failing calls return.
        lose_device: the first failing call also loses its device.
        seen: calls counted so far.
        fired: calls made to fail so far.
    """

    calls: tuple[str, ...]
    nth: int
    times: int | None = 1
    result: int = vk.VK_ERROR_OUT_OF_HOST_MEMORY
    lose_device: bool = False
    seen: int = 0
    fired: int = 0

    def __str__(self) -> str:
        site = "+".join(self.calls)
        when = f"{self.nth}" + ("+" if self.times is None else
                                (f" x{self.times}" if self.times != 1 else ""))
        if self.lose_device:
            return f"device_lost:{site}:{when}"
        return f"{site}:{when}:{result_name(self.result)}"


_lock = threading.RLock()
_rules: list[Rule] = []
_lost: set[int] = set()  # dispatch pointers of lost devices
_gated: set[str] = set()


def _site_calls(site: str) -> tuple[str, ...]:
    calls = SITES.get(site, (site,))
    for call in calls:
        try:
            function = binding.real_function(call)
        except AttributeError:
            raise VkumdValueError(f"fault site {site!r} is not a Vulkan function; use an entry "
                                  f"point such as vkAllocateMemory, or one of {sorted(SITES)}")\
                from None
        if ffi.typeof(function).result.cname not in ("VkResult", "enum VkResult"):
            raise VkumdValueError(f"{call} returns no VkResult, so it cannot be made to fail")
    return calls


def _rule(site: str, nth: int, times: int | None, result: int | str | None,
          lose_device: bool) -> Rule:
    calls = _site_calls(site)
    if isinstance(nth, bool) or not isinstance(nth, int) or nth < 1:
        raise VkumdValueError(f"nth={nth!r}: count calls from 1")
    if times is not None and (isinstance(times, bool) or not isinstance(times, int)
                              or times < 1):
        raise VkumdValueError(f"times={times!r}: pass a count >= 1, or None for every call")
    if lose_device:
        code = _DEVICE_LOST
    elif result is None:
        code = _DEFAULT_RESULT.get(calls[0], vk.VK_ERROR_OUT_OF_HOST_MEMORY)
    else:
        code = result_code(result) if isinstance(result, str) else int(result)
    return Rule(calls, nth, times, code, lose_device)


def parse(spec: str) -> list[Rule]:
    """Read rules in the ``VKUMD_FAULTS`` grammar (see the module docstring); arm nothing.

    Raises:
        VkumdValueError: a rule does not follow the grammar or names an unknown function.
    """
    rules = []
    for text in filter(None, (part.strip() for part in spec.split(","))):
        fields = text.split(":")
        lose = fields[0] == "device_lost"
        if lose:
            fields = fields[1:]
        if len(fields) not in ((2,) if lose else (2, 3)):
            raise VkumdValueError(
                f"VKUMD_FAULTS rule {text!r}: write site:nth[:result] or device_lost:site:nth, "
                "e.g. vkAllocateMemory:3 or device_lost:submit:5")
        site, nth_text = fields[0], fields[1]
        repeat = nth_text.endswith("+")
        digits = nth_text.rstrip("+")
        if not digits.isdigit():
            raise VkumdValueError(f"VKUMD_FAULTS rule {text!r}: {nth_text!r} is not a call "
                                  "number (N, or N+ for the Nth and every later call)")
        result = fields[2] if len(fields) == 3 else None
        rules.append(_rule(site, int(digits), None if repeat else 1, result, lose))
    return rules


def _dispatch_key(args: tuple[Any, ...]) -> int | None:
    """The device a call is made on, as the loader's dispatch pointer of its first argument.

    The loader writes its dispatch-table pointer into the first word of every dispatchable
    handle, and a device's queues and command buffers get the device's table.
    """
    handle = args[0] if args else None
    if not isinstance(handle, ffi.CData) or handle == ffi.NULL:
        return None
    return int(ffi.cast("uintptr_t*", handle)[0])


def _gate(name: str) -> Any:
    loss_aware = name in LOSS_REPORTING

    def gate(*args: Any) -> int | None:
        with _lock:
            if name == "vkDestroyDevice":
                _lost.discard(_dispatch_key(args))  # type: ignore[arg-type]
                _refresh()
                return None
            if loss_aware and _lost and _dispatch_key(args) in _lost:
                if name == "vkDeviceWaitIdle":
                    binding.real_function(name)(*args)
                return _DEVICE_LOST
            for rule in _rules:
                if name not in rule.calls:
                    continue
                rule.seen += 1
                if rule.seen < rule.nth or (rule.times is not None and rule.fired >= rule.times):
                    continue
                rule.fired += 1
                if rule.lose_device:
                    key = _dispatch_key(args)
                    if key is not None:
                        _lost.add(key)
                return rule.result
        return None

    return gate


def _refresh() -> None:
    """Gate exactly the functions armed rules or lost devices need."""
    wanted = {call for rule in _rules for call in rule.calls}
    if _lost or any(rule.lose_device for rule in _rules):
        wanted.update(LOSS_REPORTING)
        wanted.add("vkDestroyDevice")
    for name in wanted - _gated:
        binding.intercept(name, _gate(name))
    for name in _gated - wanted:
        binding.release_intercept(name)
    _gated.clear()
    _gated.update(wanted)


def arm(rules: str | list[Rule]) -> list[Rule]:
    """Arm rules (a ``VKUMD_FAULTS`` string, or :class:`Rule` objects); return them.

    Raises:
        VkumdValueError: the string does not follow the grammar.
    """
    parsed = parse(rules) if isinstance(rules, str) else list(rules)
    with _lock:
        _rules.extend(parsed)
        _refresh()
    return parsed


def disarm(rules: list[Rule] | None = None) -> None:
    """Disarm ``rules`` (default: every rule). A lost device stays lost until destroyed."""
    with _lock:
        if rules is None:
            _rules.clear()
        else:
            _rules[:] = [rule for rule in _rules if all(rule is not r for r in rules)]
        _refresh()


def armed() -> list[Rule]:
    """The rules armed now."""
    with _lock:
        return list(_rules)


def arm_from_environment() -> list[Rule]:
    """Arm the rules of ``VKUMD_FAULTS`` (none when it is unset); return them.

    Raises:
        VkumdValueError: the variable does not follow the grammar.
    """
    spec = settings.text("VKUMD_FAULTS")
    return arm(spec) if spec else []


@contextlib.contextmanager
def inject(call: str, nth: int = 1, result: int | str | None = None, *,
           times: int | None = 1) -> Iterator[Rule]:
    """Make the ``nth`` call of ``call`` inside the block fail with ``result``.

    Args:
        call: a Vulkan entry point returning ``VkResult``, or a site of :data:`SITES`.
        nth: which call fails, counted from the start of the block (1-based).
        result: a ``VkResult`` (number or name); ``None``: the default of the grammar.
        times: how many calls fail from the ``nth`` on; ``None``: every later call.

    Returns:
        A context manager yielding the armed :class:`Rule` (``rule.fired`` tells whether
        the fault happened).

    Raises:
        VkumdValueError: an unknown function or result, or a count below 1.
    """
    rule = _rule(call, nth, times, result, lose_device=False)
    arm([rule])
    try:
        yield rule
    finally:
        disarm([rule])


@contextlib.contextmanager
def lose_device(at: str = "submit", nth: int = 1) -> Iterator[Rule]:
    """Lose the device at the ``nth`` call of ``at`` inside the block.

    The device stays lost after the block, until it is destroyed (its context closed).

    Args:
        at: a Vulkan entry point returning ``VkResult``, or a site of :data:`SITES`.
        nth: which call loses the device, counted from the start of the block.

    Returns:
        A context manager yielding the armed :class:`Rule`.

    Raises:
        VkumdValueError: an unknown function or a count below 1.
    """
    rule = _rule(at, nth, 1, None, lose_device=True)
    arm([rule])
    try:
        yield rule
    finally:
        disarm([rule])
