"""`qgpu eval-chat`: the shipped question set (questions.json) put to the chat, greedy, one
fresh conversation per question, scored on what the original measured: did Qwen call the
right tool, did the launches end, is the expected value in the tool response, and does
the final answer repeat it. Questions that need no tool score on the answer alone."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from qwengpu.chat.session import Chat

QUESTIONS = Path(__file__).with_name("questions.json")
TOOL_OF = {"normal": "gpu_eval", "advanced": "run_cuda"}


@dataclass
class Score:
    kind: str  # normal, no_tool or advanced
    question: str
    expected: Any
    called: bool  # the right tool called (no_tool: no tool called)
    ended: bool  # every launch ended (no error in the responses)
    computed: bool  # the expected value is in a tool response
    answered: bool  # the final answer repeats it
    answer: str
    launches: int
    tokens: int

    @property
    def passed(self) -> bool:
        if self.kind == "no_tool":
            return self.called and self.answered
        return self.called and self.ended and self.computed and self.answered


def load_questions(kinds: tuple[str, ...] = ("normal", "no_tool", "advanced")) -> list[dict]:
    data = json.loads(QUESTIONS.read_text())
    return [{"kind": kind, **q} for kind in kinds for q in data[kind]]


def score(chat: Chat, item: dict) -> Score:
    """Put one question to a fresh conversation and score the reply."""
    kind = item["kind"]
    chat.clear()
    chat.set_mode("advanced" if kind == "advanced" else "normal")
    reply = chat.send(item["question"])
    expected = item["expected"]
    if kind == "no_tool":
        answered = expected.lower() in reply.answer.lower()
        return Score(
            kind, item["question"], expected, not reply.results, True, True, answered,
            reply.answer, 0, 0,
        )  # fmt: skip
    calls = [c for c in _calls(chat) if c == TOOL_OF[kind]]
    computed = any(_holds(result.values, expected) for result in reply.results if result.ok)
    return Score(
        kind,
        item["question"],
        expected,
        called=bool(calls),
        ended=bool(reply.results) and all(r.ok for r in reply.results[-1:]),
        computed=computed,
        answered=_mentions(reply.answer, expected),
        answer=reply.answer,
        launches=len(reply.launches),
        tokens=sum(launch.tokens for launch in reply.launches),
    )


def _calls(chat: Chat) -> list[str]:
    return [
        call["function"]["name"]
        for message in chat.messages
        for call in message.get("tool_calls", [])
    ]


def _holds(values: list[Any], expected: Any) -> bool:
    """The expected value among a response's values (advanced mode: its arrays)."""
    return any(value == expected for value in values)


def _mentions(answer: str, expected: Any) -> bool:
    flat = json.dumps(expected)
    return flat in answer.replace(" ", "").replace("\n", "") or (
        isinstance(expected, int) and str(expected) in answer
    )


def report(scores: list[Score]) -> str:
    """One line per question and the totals, as the original reported them."""
    lines = []
    for s in scores:
        marks = "".join("+" if x else "." for x in (s.called, s.ended, s.computed, s.answered))
        lines.append(f"{'PASS' if s.passed else 'fail'} {marks} [{s.kind}] {s.question}")
    for kind in ("normal", "no_tool", "advanced"):
        mine = [s for s in scores if s.kind == kind]
        if mine:
            lines.append(f"{kind}: {sum(s.passed for s in mine)} of {len(mine)} passed")
    lines.append("marks: tool called, launches ended, value in the response, answer repeats it")
    return "\n".join(lines)


def as_json(scores: list[Score]) -> list[dict]:
    return [{**asdict(s), "passed": s.passed} for s in scores]
