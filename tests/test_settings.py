"""``VKUMD_*`` readers are strict: a value that is neither on nor off, or not a size, is refused.

The incident: ``VKUMD_VALIDATION=2``, ``VKUMD_ZERO_MEMORY=maybe`` and ``VKUMD_CACHE=banana``
were read as "off", so a run meant to be validated was not. Every flag in
:data:`vkumd.settings.FLAGS` is covered, and FLAGS is checked against the documented variables
and against every ``settings.flag`` call in the package, so a new flag cannot slip past.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import vkumd
from vkumd import settings
from vkumd.errors import VkumdValueError
from vkumd.vk.handle import live_objects

FLAGS = sorted(settings.FLAGS)
PACKAGE = Path(settings.__file__).resolve().parent
BAD_FLAG_VALUES = ["2", "maybe", "banana", "enabled", "-1", "10", "y", "truee"]


@pytest.fixture(autouse=True)
def _clean_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    # The suite itself runs with some of these set (VKUMD_VALIDATION=1): start from unset.
    for name in [*FLAGS, "VKUMD_MEMORY_LIMIT"]:
        monkeypatch.delenv(name, raising=False)


def test_flags_are_the_documented_switches() -> None:
    assert settings.FLAGS <= set(settings.VARIABLES)
    switches = {name for name, meaning in settings.VARIABLES.items()
                if re.match(r"`[01]`", meaning)}
    assert switches == settings.FLAGS


def test_every_flag_read_in_the_package_is_listed() -> None:
    read = set()
    for path in PACKAGE.rglob("*.py"):
        read |= set(re.findall(r"settings\.flag\(\s*\"(VKUMD_\w+)\"", path.read_text()))
    assert read, "found no settings.flag calls: the pattern is stale"
    assert read <= settings.FLAGS, f"flags read but not in settings.FLAGS: {read - settings.FLAGS}"


@pytest.mark.parametrize("name", FLAGS)
@pytest.mark.parametrize("value, expected", [
    ("1", True), ("true", True), ("YES", True), (" On ", True),
    ("0", False), ("false", False), ("No", False), ("OFF ", False), ("", False), ("  ", False),
])
def test_flag_spellings(name: str, value: str, expected: bool,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    assert settings.flag(name) is expected
    assert settings.flag(name, default=True) is expected


@pytest.mark.parametrize("name", FLAGS)
def test_unset_flag_is_its_default(name: str) -> None:
    assert settings.flag(name) is False
    assert settings.flag(name, default=True) is True


@pytest.mark.parametrize("name", FLAGS)
@pytest.mark.parametrize("value", BAD_FLAG_VALUES)
def test_flag_refuses_other_values(name: str, value: str,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(VkumdValueError) as raised:
        settings.flag(name, default=True)
    message = str(raised.value)
    assert f"{name}={value!r}" in message
    for spelling in (*settings.TRUE_SPELLINGS, *settings.FALSE_SPELLINGS):
        assert spelling in message
    with pytest.raises(VkumdValueError, match=name):
        settings.check_environment()


@pytest.mark.parametrize("name", FLAGS)
def test_context_refuses_a_bad_flag_before_creating_anything(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "2")
    before = live_objects()
    with pytest.raises(VkumdValueError, match=f"{name}='2'"):
        vkumd.Context()
    assert live_objects() == before


@pytest.mark.parametrize("name, value", [("VKUMD_VALIDATION", "2"),
                                         ("VKUMD_ZERO_MEMORY", "maybe"),
                                         ("VKUMD_CACHE", "banana")])
def test_the_incident_values(name: str, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(VkumdValueError, match=f"{name}={value!r} is neither on nor off"):
        vkumd.Context()


def test_cache_switch_is_strict_where_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from vkumd.compiler.spirv_cache import SpirvCache

    monkeypatch.setenv("VKUMD_CACHE", "banana")
    with pytest.raises(VkumdValueError, match="VKUMD_CACHE"):
        settings.disk_cache_enabled()
    with pytest.raises(VkumdValueError, match="VKUMD_CACHE"):
        _ = SpirvCache().disk_enabled


@pytest.mark.parametrize("value, size", [
    ("1048576", 1048576), ("512MiB", 512 * 2**20), ("2GB", 2 * 10**9), ("2 GiB", 2 * 2**30),
    ("1.5GiB", 3 * 2**29), (".5k", 500), ("0", 0), ("8mib", 8 * 2**20), ("1b", 1),
    ("16tib", 16 * 2**40),
])
def test_parse_size_reads(value: str, size: int) -> None:
    assert settings.parse_size(value) == size


@pytest.mark.parametrize("value", [
    "-1", "-1GiB", "+5", "nan", "inf", "1e400", "1e3", "1_000", "0x10", "1.1b", "0.5", "lots",
    "", "12 parsecs", "1.5.2k", "99999999999tib", "18446744073709551616",
])
def test_parse_size_refuses(value: str) -> None:
    with pytest.raises(VkumdValueError, match="size|bytes"):
        settings.parse_size(value)


def test_parse_size_takes_the_largest_device_size() -> None:
    assert settings.parse_size(str(settings.MAX_SIZE)) == settings.MAX_SIZE


# "0.5" is a share of the heap now (docs/scale-out.md); "1.5" is a share above the whole.
@pytest.mark.parametrize("value", ["-1", "nan", "1e400", "1.5", "0%"])
def test_memory_limit_is_refused_at_context_creation(value: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKUMD_MEMORY_LIMIT", value)
    with pytest.raises(VkumdValueError, match=f"VKUMD_MEMORY_LIMIT: .*{re.escape(value)}"):
        vkumd.Context()


# Variables whose spelling a kernel or the graph passes own: before they were read at
# Context creation, a garbage block config was accepted wherever its path was not taken
# (always, on a CPU driver), so a sweep meant to force a config silently ran the default.
READER_CASES = [
    ("VKUMD_GEMM_COOPMAT_TILE", "garbage", "BMxBNxBK:WG_MxWG_N"),
    ("VKUMD_GEMM_COOPMAT_TILE", "0x128x32:2x2", "at least 1"),
    ("VKUMD_ATTENTION_COOPMAT_BLOCK", "garbage", "SUBGROUPSxKEYS"),
    ("VKUMD_ATTENTION_COOPMAT_BLOCK", "3x64", "must be one of"),
    ("VKUMD_DISABLE_PASSES", "cse,no_such_pass", "the passes are"),
]


@pytest.mark.parametrize("name, value, accepted", READER_CASES)
def test_registered_variables_are_refused_at_context_creation(
        name: str, value: str, accepted: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(VkumdValueError, match=name) as raised:
        settings.check_environment()
    assert accepted in str(raised.value)
    before = live_objects()
    with pytest.raises(VkumdValueError, match=name):
        vkumd.Context()
    assert live_objects() == before


@pytest.mark.parametrize("name, value", [("VKUMD_GEMM_COOPMAT_TILE", "128x128x32:2x2"),
                                         ("VKUMD_GEMM_COOPMAT_TILE", "64x64x32:2x2:4"),
                                         ("VKUMD_ATTENTION_COOPMAT_BLOCK", "4x64"),
                                         ("VKUMD_DISABLE_PASSES", "cse, dce")])
def test_registered_variables_take_their_documented_forms(
        name: str, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    settings.check_environment()


# Variables documented as sizes ("a size (`2GiB`, ...)"), read with parse_size.
SIZES = sorted(name for name, meaning in settings.VARIABLES.items() if "a size" in meaning)


@pytest.mark.parametrize("name", SIZES)
def test_size_variables_are_refused_at_context_creation(name: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "garbage")
    with pytest.raises(VkumdValueError, match=f"{name}: cannot read 'garbage' as a size"):
        settings.check_environment()


def test_every_documented_variable_is_read_strictly() -> None:
    # A flag, a size, free text (paths, a name) or a registered reader: nothing is left to
    # be read loosely wherever it happens to be used.
    assert "VKUMD_MEMORY_LIMIT" in SIZES
    covered = settings.FLAGS | set(SIZES) | settings.FREE_TEXT | set(settings.READERS)
    assert set(settings.VARIABLES) <= covered, set(settings.VARIABLES) - covered
    with pytest.raises(VkumdValueError, match="not a documented"):
        settings.register_reader("VKUMD_NO_SUCH_THING", str)
