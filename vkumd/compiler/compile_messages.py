"""glslang's diagnostics: parsed into file and line, and formatted into a compile error.

The expanded source remembers which file each line came from (``shaders/include`` helpers
included), so an error names ``common.glsl:12`` rather than a line of the concatenation, and
quotes the offending line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vkumd.compiler.shader_source import ExpandedSource


@dataclass(frozen=True)
class CompileMessage:
    """One diagnostic of glslang, mapped to a file and line.

    Attributes:
        severity: ``"ERROR"`` or ``"WARNING"``.
        file: display name of the file, e.g. ``"gemm.comp"`` or ``"common.glsl"``.
        line: 1-based line in that file (0 when glslang gave none).
        text: glslang's message.
    """

    severity: str
    file: str
    line: int
    text: str


_MESSAGE_RE = re.compile(r"^(ERROR|WARNING):\s*(.*?):(\d+):\s*(.*)$")


def parse_messages(info_log: str) -> list[CompileMessage]:
    """Split a glslang info log into diagnostics, dropping its summary lines.

    Args:
        info_log: text of ``glslang_shader_get_info_log`` or ``glslangValidator``'s output.

    Returns:
        The diagnostics that name a location, in log order.
    """
    messages = []
    for raw in info_log.splitlines():
        match = _MESSAGE_RE.match(raw.strip())
        if match is None:
            continue
        severity, file, line, text = match.groups()
        if text.strip() == "'' : compilation terminated":
            continue
        messages.append(CompileMessage(severity, file, int(line), text.strip()))
    return messages


def format_error(kernel: str, stage: str, info_log: str, expanded: ExpandedSource) -> str:
    """Build the message of a :class:`ShaderCompileError`.

    Args:
        kernel: kernel name.
        stage: what failed (``"preprocess"``, ``"parse"``, ``"link"``, ``"glslangValidator"``).
        info_log: glslang's log.
        expanded: the source that was compiled (to quote offending lines).

    Returns:
        The kernel name, then each error as ``file:line: message`` with the source line.
    """
    errors = [m for m in parse_messages(info_log) if m.severity == "ERROR"]
    lines = [f"cannot compile kernel {kernel!r} ({stage} failed):"]
    for message in errors:
        lines.append(f"  {message.file}:{message.line}: error: {message.text}")
        source = expanded.files.get(message.file)
        if source is not None and 1 <= message.line <= len(source):
            lines.append(f"    {message.line:5d} | {source[message.line - 1]}")
    if not errors:
        lines.append("  " + (info_log.strip() or "(glslang gave no message)").replace(
            "\n", "\n  "))
    return "\n".join(lines)
