"""A conversation with Qwen that uses its own GPU.

Qwen's turns are greedy text from the model (circuit tokens never win: their rows are
masked out of text generation). When a turn calls a tool, the host runs it: every
launch goes to the machine in the model's weights, in a sequence of its own (like a CUDA
stream), and the numbers read out of that sequence's recurrent state go back as the
tool response; Qwen then continues. `Chat(...).send(text)` is one user turn."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from qwengpu.chat.calc import Calculator, LaunchRecord
from qwengpu.chat.toolcall import CLOSE_CALL, neutralise, tool_calls, without_calls
from qwengpu.chat.tools import TOOLS, ToolResult, run_tool
from qwengpu.errors import ArgError

MODES = ("normal", "advanced")
SYSTEM = {
    "normal": (
        "You are Qwen. You have your own GPU, built into your weights. For any arithmetic, "
        "call gpu_eval with the expression and answer with the number it returns."
    ),
    "advanced": (
        "You are Qwen. You have your own GPU, built into your weights; it runs CUDA. To "
        "compute something, write an integer CUDA kernel and call run_cuda; pass every "
        "input number as an argument. If it fails, read the error and fix the kernel."
    ),
}
MAX_TOOL_ROUNDS = {"normal": 4, "advanced": 3}  # advanced: three attempts at a kernel


@dataclass
class Reply:
    """One assistant turn: its text (tool calls and all), the tool calls' results and
    the launches behind them."""

    text: str
    results: list[ToolResult] = field(default_factory=list)
    tokens: int = 0  # text tokens the model wrote
    seconds: float = 0.0

    @property
    def launches(self) -> list[LaunchRecord]:
        return [launch for result in self.results for launch in result.launches]

    @property
    def answer(self) -> str:
        """The prose after the last tool call."""
        return without_calls(self.text.rsplit(CLOSE_CALL, 1)[-1])


class Chat:
    """Qwen with its GPU. `model` is a checkpoint directory from `qgpu build`, a loaded
    ModelBackend, or None (the default checkpoint). `text_model` and `tokenizer` default to
    the checkpoint's own; a caller may give others for the text side alone (the launches
    still run on `model`'s machine)."""

    def __init__(
        self,
        model: Any = None,
        *,
        mode: str = "normal",
        text_model: Any = None,
        tokenizer: Any = None,
        dtype: str = "float32",
        device: str | None = None,
        check: bool = False,
        full_forward: bool | None = None,
        max_new_tokens: int = 256,
        on_text: Callable[[str], None] | None = None,
        on_launch: Callable[[LaunchRecord], None] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ArgError(f"--mode {mode}: choose normal or advanced")
        self.calculator = Calculator(
            model=model,
            dtype=dtype,
            device=device,
            check=check,
            progress=progress,
            full_forward=full_forward,
        )
        backend = self.calculator.backend_model
        self.model = text_model if text_model is not None else backend.model
        self.tokenizer = tokenizer if tokenizer is not None else backend.tokenizer
        if self.tokenizer is None:
            raise ArgError(
                "the chat needs a checkpoint's tokenizer: build one with `qgpu build` "
                "(offline: --base synthetic:0.8b) and pass --model DIR"
            )
        # text generation never picks a circuit token (nor a row no token has); a text
        # model of the caller's holds no circuit rows
        rows = len(self.tokenizer)
        self.text_rows = rows if text_model is not None else min(rows, backend.offset)
        self.mode = mode
        self.max_new_tokens = max_new_tokens
        self.on_text = on_text or (lambda _: None)
        self.on_launch = on_launch or (lambda _: None)
        self.messages: list[dict[str, Any]] = []

    def clear(self) -> None:
        self.messages = []

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ArgError(f"mode {mode}: choose normal or advanced")
        self.mode = mode

    def send(self, text: str, *, assistant: Sequence[str] | None = None) -> Reply:
        """One user turn and Qwen's answer. `assistant` supplies Qwen's text for its
        first rounds (teacher forcing: it is read through the model's forward passes as
        if generated); later rounds are generated."""
        self.messages.append({"role": "user", "content": neutralise(text)})
        forced = list(assistant or [])
        reply = Reply("")
        started = time.perf_counter()
        for _ in range(MAX_TOOL_ROUNDS[self.mode] + 1):
            segment, tokens = self._assistant_text(forced.pop(0) if forced else None)
            reply.text += segment
            reply.tokens += tokens
            calls = tool_calls(segment)
            message: dict[str, Any] = {"role": "assistant", "content": without_calls(segment)}
            if not calls:
                self.messages.append(message)
                break
            message["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in calls
            ]
            self.messages.append(message)
            for call in calls:
                result = run_tool(call.name, call.arguments, self.calculator)
                for launch in result.launches:
                    self.on_launch(launch)
                reply.results.append(result)
                self.messages.append({"role": "tool", "content": result.text})
        reply.seconds = time.perf_counter() - started
        return reply

    def prompt_ids(self) -> list[int]:
        """The conversation so far in the model's chat template, ready for its turn."""
        text = self.tokenizer.apply_chat_template(
            self._with_system(), tools=TOOLS[self.mode], add_generation_prompt=True, tokenize=False
        )
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _with_system(self) -> list[dict[str, Any]]:
        return [{"role": "system", "content": SYSTEM[self.mode]}, *self.messages]

    def _assistant_text(self, forced: str | None) -> tuple[str, int]:
        """Qwen's next round: `forced` read through the model, else greedy text up to
        the end of its turn or of its first tool call. Returns (text, tokens)."""
        import torch
        from transformers import DynamicCache

        ids = self.prompt_ids()
        device = self.model.device
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        cache = DynamicCache(config=self.model.config)
        written: list[int] = []
        text = ""
        with torch.no_grad():
            if forced is not None:
                forced_ids = self.tokenizer.encode(forced, add_special_tokens=False)
                feed = ids + forced_ids
                self.model(input_ids=torch.tensor([feed], device=device), cache=cache)
                self.on_text(forced)
                return forced, len(forced_ids)
            logits = self._forward(torch.tensor([ids], device=device), cache)
            for _ in range(self.max_new_tokens):
                next_id = int(logits.argmax())
                if next_id == end:
                    break
                written.append(next_id)
                piece = self.tokenizer.decode(written)[len(text) :]
                text += piece
                self.on_text(piece)
                if text.rstrip().endswith(CLOSE_CALL):
                    break
                logits = self._forward(torch.tensor([[next_id]], device=device), cache)
        return text, len(written)

    def _forward(self, ids: Any, cache: Any) -> Any:
        """The last position's logits over the text rows only."""
        out = self.model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1, : self.text_rows]
