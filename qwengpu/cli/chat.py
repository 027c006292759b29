"""`qgpu chat`: a terminal conversation with Qwen and its GPU. Qwen's text streams to
stdout; each launch shows on stderr as it ends. `--prompt` answers one turn and exits."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from qwengpu.errors import ArgError

HELP = """commands:
  !help            this list
  !clear           forget the conversation
  !mode [MODE]     show or set the mode: normal (expressions) or advanced (Qwen writes CUDA)
  !trace           show or hide each launch's kernel, steps and tokens
  !save FILE       write the conversation as JSON
  !exit            leave (Ctrl-D too)"""


def add_chat_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        help="a checkpoint from `qgpu build` (default: the cached default checkpoint, built "
        "from --base on first use)",
    )
    p.add_argument(
        "--base",
        help="the base of the default checkpoint (default: $QWENGPU_BASE or Qwen/Qwen3.5-2B)",
    )
    p.add_argument("--mode", default="normal", choices=("normal", "advanced"))
    p.add_argument("--prompt", help="answer this one message and exit")
    p.add_argument("--check", action="store_true", help="replay every launch on the interpreter")
    p.add_argument("--trace", action="store_true", help="show every launch's details")
    p.add_argument(
        "--full-forward",
        action="store_true",
        help="run launches through every layer (default: stop after the circuit's layers)",
    )
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--device", help="cuda, mps or cpu (default: the first present)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="per assistant round")


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    add_chat_arguments(p)
    p.add_argument(
        "--set",
        default="all",
        choices=("all", "normal", "no_tool", "advanced"),
        help="which questions (default: all 33)",
    )
    p.add_argument("--limit", type=int, help="the first N questions of the set")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def eval_cli(args: argparse.Namespace) -> int:
    from qwengpu.chat.evaluate import as_json, load_questions, report, score

    if args.limit is not None and args.limit < 1:
        raise ArgError(f"--limit {args.limit}: must be at least 1")
    kinds = ("normal", "no_tool", "advanced") if args.set == "all" else (args.set,)
    questions = load_questions(kinds)[: args.limit]
    chat = _open_chat(args, _View(trace=False), quiet=True)
    scores = []
    for i, item in enumerate(questions, 1):
        print(f"qgpu: question {i} of {len(questions)}", file=sys.stderr, flush=True)
        scores.append(score(chat, item))
    if args.json:
        print(json.dumps({"scores": as_json(scores)}))
    else:
        print(report(scores))
    return 0


def _open_chat(args: argparse.Namespace, view: _View, quiet: bool = False) -> Any:
    from qwengpu.chat.session import Chat

    if args.max_new_tokens < 1:
        raise ArgError(f"--max-new-tokens {args.max_new_tokens}: must be at least 1")
    if args.model and args.model.startswith("memory"):
        raise ArgError(
            "--model memory has no tokenizer for text; build a checkpoint with `qgpu build` "
            "(offline: --base synthetic:0.8b) and pass --model DIR"
        )
    model: Any = args.model
    if model is None:
        from qwengpu.host.model_backend import model_backend

        model = model_backend(None, dtype=args.dtype, base=args.base, device=args.device)
    return Chat(
        model,
        mode=args.mode,
        dtype=args.dtype,
        device=args.device,
        check=args.check,
        full_forward=args.full_forward or None,
        max_new_tokens=args.max_new_tokens,
        on_text=None if quiet else view.text,
        on_launch=None if quiet else view.launch,
        progress=view.say,
    )


def chat_cli(args: argparse.Namespace) -> int:
    view = _View(trace=args.trace)
    chat = _open_chat(args, view)
    if args.prompt is not None:
        view.turn(chat, args.prompt)
        return 0
    view.say(f"chatting in {chat.mode} mode; !help lists the commands")
    while True:
        try:
            line = input("> ")
        except EOFError:
            print()
            return 0
        except KeyboardInterrupt:
            print()
            return 0
        if not line.strip():
            continue
        if line.startswith("!"):
            if not view.command(chat, line):
                return 0
            continue
        try:
            view.turn(chat, line)
        except KeyboardInterrupt:
            view.say("interrupted")


class _View:
    """What the terminal shows: streamed text, launches, command answers."""

    def __init__(self, trace: bool) -> None:
        self.trace = trace

    def say(self, message: str) -> None:
        print(f"qgpu: {message}", file=sys.stderr, flush=True)

    def text(self, piece: str) -> None:
        print(piece, end="", flush=True)

    def launch(self, record: Any) -> None:
        rate = record.tokens / record.seconds if record.seconds > 0 else 0.0
        line = f"[gpu] {record.operation}: {record.tokens} tokens, {rate:.1f} tokens/s"
        if self.trace:
            line += (
                f" ({record.kernel}, grid {list(record.grid)}, block {list(record.block)}, "
                f"{record.steps} EXEC steps{', checked' if record.checked else ''})"
            )
        print(f"\n{line}", file=sys.stderr, flush=True)

    def turn(self, chat: Any, text: str) -> None:
        reply = chat.send(text)
        print()
        for result in reply.results:
            if not result.ok:
                self.say(f"tool: {result.text.splitlines()[0]}")

    def command(self, chat: Any, line: str) -> bool:
        """Run a !command; False to leave."""
        name, _, rest = line[1:].strip().partition(" ")
        rest = rest.strip()
        if name in ("exit", "quit"):
            return False
        if name == "help":
            print(HELP)
        elif name == "clear":
            chat.clear()
            self.say("conversation cleared")
        elif name == "mode":
            if rest:
                try:
                    chat.set_mode(rest)
                except ArgError as exc:
                    self.say(str(exc))
                    return True
            self.say(f"mode: {chat.mode}")
        elif name == "trace":
            self.trace = not self.trace
            self.say(f"trace {'on' if self.trace else 'off'}")
        elif name == "save":
            if not rest:
                self.say("!save FILE")
                return True
            try:
                Path(rest).write_text(json.dumps(chat.messages, indent=2) + "\n")
            except OSError as exc:
                self.say(f"cannot write {rest}: {exc.strerror}")
                return True
            self.say(f"saved {len(chat.messages)} messages to {rest}")
        else:
            self.say(f"unknown command !{name}; !help lists them")
        return True
