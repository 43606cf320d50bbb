"""Push-constant layouts, written once in Python beside each kernel.

A :class:`PushLayout` lists the members of a shader's ``layout(push_constant)`` block in
order, each with its type and array length. It packs values into the bytes a launch carries
and knows each member's byte offset, which ``tests/compiler/test_push_layouts.py`` compares
with the ``Offset`` decorations glslang writes into the SPIR-V, so the Python side and the
GLSL side cannot drift apart unnoticed.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from vkumd.errors import VkumdValueError

# Member types: struct code and size in bytes. Push blocks use scalar/std430 rules, where a
# scalar (or array of scalars) aligns to its own size; u64 also stands for GLSL's uvec2.
PUSH_TYPES = {"u32": ("I", 4), "i32": ("i", 4), "f32": ("f", 4), "u64": ("Q", 8)}
_MEMBER_FORM = re.compile(r"^([A-Za-z_]\w*):(u32|i32|f32|u64)(?:\[(\d+)\])?$")


@dataclass(frozen=True)
class PushMember:
    """One member of a push-constant block.

    Attributes:
        name: the GLSL member name.
        type: ``u32``, ``i32``, ``f32`` or ``u64``.
        count: array length (1 for a scalar).
        offset: byte offset in the block.
    """

    name: str
    type: str
    count: int
    offset: int

    @property
    def size(self) -> int:
        """Bytes the member occupies."""
        return PUSH_TYPES[self.type][1] * self.count


class PushLayout:
    """The push-constant block of one kernel.

    Args:
        members: ``"name:type"`` or ``"name:type[count]"`` in block order, e.g.
            ``PushLayout("n:u32", "shape:u32[6]", "alpha:f32")``.

    Raises:
        VkumdValueError: a malformed member, a repeated name, or a member that would need
            padding before it (order members so each starts aligned to its size).
    """

    def __init__(self, *members: str) -> None:
        parsed: list[PushMember] = []
        codes = ["<"]
        offset = 0
        for text in members:
            match = _MEMBER_FORM.match(text)
            if match is None:
                raise VkumdValueError(f"push member {text!r}: write name:type or "
                                      f"name:type[count], type one of {', '.join(PUSH_TYPES)}")
            name, kind, count_text = match.groups()
            count = int(count_text) if count_text else 1
            code, size = PUSH_TYPES[kind]
            if offset % size:
                raise VkumdValueError(f"push member {name!r} would start at byte {offset}, "
                                      f"not a multiple of its {size}-byte alignment")
            if any(m.name == name for m in parsed):
                raise VkumdValueError(f"push member {name!r} is declared twice")
            parsed.append(PushMember(name, kind, count, offset))
            codes.append(f"{count}{code}" if count > 1 else code)
            offset += size * count
        self.members: tuple[PushMember, ...] = tuple(parsed)
        self.size = offset
        self._struct = struct.Struct("".join(codes))
        self.pack = self._struct.pack
        """Pack values (arrays flattened, in member order) into the block's bytes."""

    @property
    def names(self) -> tuple[str, ...]:
        """Member names in order."""
        return tuple(m.name for m in self.members)

    def offset(self, name: str) -> int:
        """Byte offset of member ``name``."""
        for member in self.members:
            if member.name == name:
                return member.offset
        raise VkumdValueError(f"no push member {name!r}; members: {', '.join(self.names)}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PushLayout) and other.members == self.members

    def __hash__(self) -> int:
        return hash(self.members)

    def __repr__(self) -> str:
        inner = ", ".join(f"{m.name}:{m.type}" + (f"[{m.count}]" if m.count > 1 else "")
                          for m in self.members)
        return f"PushLayout({inner}; {self.size} bytes)"


NO_PUSH = PushLayout()
