"""Qwen3.5's XML tool calls, read out of an assistant turn:

    <tool_call>
    <function=gpu_eval>
    <parameter=expression>
    [1, 2, 3] @ [4, 5, 6]
    </parameter>
    </function>
    </tool_call>

and the markup that user text must not carry into the conversation."""

from __future__ import annotations

import re
from dataclasses import dataclass

CALL = re.compile(r"<tool_call>\s*<function=([^>\s]+)>(.*?)</function>\s*</tool_call>", re.S)
PARAMETER = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.S)
OPEN_CALL = "<tool_call>"
CLOSE_CALL = "</tool_call>"
# what only the template and the host may write: turn markers, tool markup, thinking
RESERVED = re.compile(
    r"<\|[^|\s]*\|>|</?tool_call>|</?tool_response>|</?think>|<function=|</function>"
    r"|<parameter=|</parameter>"
)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, str]


def tool_calls(text: str) -> list[ToolCall]:
    """The complete calls in an assistant's text, in order."""
    calls = []
    for match in CALL.finditer(text):
        arguments = {name: value for name, value in PARAMETER.findall(match.group(2))}
        calls.append(ToolCall(match.group(1), arguments))
    return calls


def without_calls(text: str) -> str:
    """The assistant's prose, its tool calls taken out."""
    return CALL.sub("", text).strip()


def neutralise(text: str) -> str:
    """User text with the reserved markup defused (a zero-width space after '<'), so that
    it reaches the model as the characters typed, never as turn or tool structure."""
    return RESERVED.sub(lambda m: m.group(0)[0] + "\u200b" + m.group(0)[1:], text)
