"""A small SPIR-V reader for tests: the push-constant block's members as glslang laid them out.

Walks the instruction stream (SPIR-V spec, 2.3 "Physical Layout") for the variable in the
PushConstant storage class, follows its pointer to the block's struct type and reports, per
member, its name (``OpMemberName``), its ``Offset`` decoration and its size in bytes (from
the scalar, vector and array types it is built of).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = 0x07230203
OP_MEMBER_NAME = 6
OP_TYPE_INT = 21
OP_TYPE_FLOAT = 22
OP_TYPE_VECTOR = 23
OP_TYPE_ARRAY = 28
OP_TYPE_STRUCT = 30
OP_TYPE_POINTER = 32
OP_CONSTANT = 43
OP_VARIABLE = 59
OP_MEMBER_DECORATE = 72
DECORATION_OFFSET = 35
STORAGE_PUSH_CONSTANT = 9


@dataclass(frozen=True)
class BlockMember:
    """One member of the push-constant block as the SPIR-V declares it."""

    name: str
    offset: int
    size: int


def _string(words: list[int]) -> str:
    raw = struct.pack(f"<{len(words)}I", *words)
    return raw.split(b"\0", 1)[0].decode()


def push_block(spirv: bytes) -> list[BlockMember]:
    """The push-constant block's members in declaration order; empty if the shader has none.

    Raises:
        ValueError: ``spirv`` is not a SPIR-V module.
    """
    count = len(spirv) // 4
    words = list(struct.unpack(f"<{count}I", spirv[:count * 4]))
    if count < 5 or words[0] != MAGIC:
        raise ValueError("not a SPIR-V module (bad magic number)")
    names: dict[tuple[int, int], str] = {}
    offsets: dict[tuple[int, int], int] = {}
    types: dict[int, tuple[int, list[int]]] = {}
    constants: dict[int, int] = {}
    block_pointer = None
    pointers: dict[int, int] = {}
    index = 5
    while index < count:
        length, opcode = words[index] >> 16, words[index] & 0xFFFF
        if length == 0:
            raise ValueError(f"instruction of length 0 at word {index}")
        operands = words[index + 1:index + length]
        if opcode == OP_MEMBER_NAME:
            names[(operands[0], operands[1])] = _string(operands[2:])
        elif opcode == OP_MEMBER_DECORATE and operands[2] == DECORATION_OFFSET:
            offsets[(operands[0], operands[1])] = operands[3]
        elif opcode in (OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_VECTOR, OP_TYPE_ARRAY,
                        OP_TYPE_STRUCT):
            types[operands[0]] = (opcode, operands[1:])
        elif opcode == OP_TYPE_POINTER:
            pointers[operands[0]] = operands[2]
        elif opcode == OP_CONSTANT:
            constants[operands[1]] = operands[2]
        elif opcode == OP_VARIABLE and operands[2] == STORAGE_PUSH_CONSTANT:
            block_pointer = operands[0]
        index += length
    if block_pointer is None:
        return []

    def size_of(type_id: int) -> int:
        opcode, rest = types[type_id]
        if opcode in (OP_TYPE_INT, OP_TYPE_FLOAT):
            return rest[0] // 8
        if opcode == OP_TYPE_VECTOR:
            return size_of(rest[0]) * rest[1]
        if opcode == OP_TYPE_ARRAY:
            return size_of(rest[0]) * constants[rest[1]]
        raise ValueError(f"unexpected member type (opcode {opcode}) in the push block")

    struct_id = pointers[block_pointer]
    opcode, member_types = types[struct_id]
    assert opcode == OP_TYPE_STRUCT
    return [BlockMember(names.get((struct_id, i), f"member{i}"), offsets[(struct_id, i)],
                        size_of(t)) for i, t in enumerate(member_types)]


OP_SPEC_CONSTANT = 50
OP_DECORATE = 71
DECORATION_SPEC_ID = 1


def spec_constant_defaults(spirv: bytes) -> dict[int, int]:
    """``{SpecId: default}`` of the module's scalar 32-bit specialization constants.

    Raises:
        ValueError: ``spirv`` is not a SPIR-V module.
    """
    count = len(spirv) // 4
    words = list(struct.unpack(f"<{count}I", spirv[:count * 4]))
    if count < 5 or words[0] != MAGIC:
        raise ValueError("not a SPIR-V module (bad magic number)")
    spec_ids: dict[int, int] = {}
    defaults: dict[int, int] = {}
    index = 5
    while index < count:
        length, opcode = words[index] >> 16, words[index] & 0xFFFF
        if length == 0:
            raise ValueError(f"instruction of length 0 at word {index}")
        operands = words[index + 1:index + length]
        if opcode == OP_DECORATE and operands[1] == DECORATION_SPEC_ID:
            spec_ids[operands[0]] = operands[2]
        elif opcode == OP_SPEC_CONSTANT:
            defaults[operands[1]] = operands[2]
        index += length
    return {spec_id: defaults[target] for target, spec_id in spec_ids.items()
            if target in defaults}
