"""The model backend: a launch written by the merged model itself.

The host plays the CUDA driver: it emits the load tokens (launch geometry, program ROM,
memory image) and the start token CTA(0). From there every token is the model's greedy
prediction (transformers' `generate` with its cache) until the model emits END. The
results are read out of the recurrent state in the cache; the host computes none of them.
docs/protocol.md describes the tokens.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qwengpu.circuit.runtime import exact_arithmetic
from qwengpu.errors import ArgError, CheckpointError, LaunchError, TrapError
from qwengpu.host.launch import build_memory, check_geometry, copy_back, dim3
from qwengpu.isa.instr import (
    Program,
    address_fault,
    illegal_address_message,
    misaligned_fault,
    outside_memory_fault,
)
from qwengpu.isa.spec import WORD_MASK, MachineSpec
from qwengpu.machine.exit_bound import ExitBound, circuit_logit_min, exit_bound
from qwengpu.machine.model import CompiledMachine
from qwengpu.machine.rom import check_supported, encode_block, live_outs, live_pred_outs
from qwengpu.machine.tokens import (
    AXES,
    KINDS,
    MAX_CTAS,
    MAX_NTID,
    TRAP_REASONS,
    WORD_BYTES,
    Token,
    token,
)

PROGRESS_EVERY = 16  # EXEC steps between progress reports
PAD_TEXT_TOKEN = 0  # a text token id (any is muted); pads the shorter prompts of a batch


def word_tokens(value: int, byte_kind: str, final_kind: str, **extra: int) -> list[Token]:
    """A 32-bit value as write-back tokens: its low bytes (while a higher byte is nonzero)
    as byte tokens, then the top nonzero byte as the final token that commits it; `extra`
    fills the other fields each kind takes (BREG/FREG's sel, FAMEM's lane)."""
    kinds = (byte_kind, final_kind)
    value &= WORD_MASK
    n = max(1, (value.bit_length() + 7) // 8)
    low, top = ({f: v for f, v in extra.items() if f in KINDS[kind]} for kind in kinds)
    out = [token(byte_kind, k=k, v=(value >> (8 * k)) & 0xFF, **low) for k in range(n - 1)]
    out.append(token(final_kind, n=n, v=(value >> (8 * (n - 1))) & 0xFF, **top))
    return out


Dim3 = tuple[int, int, int]


def tokens_between_execs(spec: MachineSpec) -> int:
    """The most tokens the protocol puts after an EXEC before the next one: per stage a
    PRED and a word per lane, WORD_BYTES tokens each (an atomic, alone in its block: its
    stored word and its old value per lane), then BAR or CTA. More means the model is not
    writing a launch any more."""
    lanes = spec.lanes
    per_stage = 1 + lanes * WORD_BYTES
    return max(spec.block_size * per_stage, lanes * 2 * WORD_BYTES) + 1


def load_tokens(
    machine: CompiledMachine, program: Program, words: Sequence[int], block: Dim3, grid: Dim3
) -> list[Token]:
    """Everything the host sends before the start token: the launch shape, ROM, memory."""
    spec = machine.spec
    if program.spec != spec:
        raise ArgError(
            f"program '{program.name}' was lowered for {program.spec.describe()}; the model's "
            f"machine is {spec.describe()} (compile with that spec: qwengpu.model_spec(model))"
        )
    layout = machine.vocab.layout
    out = [
        token(kind, **dict(zip(AXES, dims, strict=True)))
        for kind, dims in (("BLOCK", block), ("GRID", grid))
    ]
    lives, pred_lives = live_outs(program.blocks), live_pred_outs(program.blocks)
    for b, block in enumerate(program.blocks):
        check_supported(b, block, spec)
        row = encode_block(layout, block, lives[b], pred_lives[b])
        if any(row):
            out.append(token("ROMSEL", romb=b))
            out += [token("ROMBYTE", romk=j, v=v) for j, v in enumerate(row) if v]
    for addr, w in enumerate(words):
        if w:
            out.append(token("MADDR", addr=addr))
            out += word_tokens(w, "BAMEM", "FAMEM", lane=machine.vocab.lanes)  # lane L: host
    return out


@dataclass
class ModelStep:
    """One EXEC the model emitted, with the tokens that followed it."""

    cta: int
    warp: int
    block: int
    lanes: tuple[int, ...]
    tokens: list[Token] = field(default_factory=list)


@dataclass
class LaunchRequest:
    """One launch of a batch (ModelBackend.launch_many)."""

    program: Program
    grid: int | Sequence[int]
    block: int | Sequence[int]
    args: Sequence[object]
    shared_mem: int = 0  # bytes of dynamic shared memory (extern __shared__)


@dataclass
class _Job:
    """A launch in flight: its load tokens, and what the model has written so far."""

    name: str
    program: Program
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    image: Any
    initial: list[int]
    prompt: list[Token]
    generated: list[Token] = field(default_factory=list)
    last_id: int = 0
    cta: int = 0
    execs: int = 0
    since_exec: int = 0  # tokens written since the last EXEC
    done: bool = False
    reported: bool = False


@dataclass
class ModelLaunch:
    initial_words: list[int]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    words: list[int]
    steps: list[ModelStep]
    generated: list[Token]
    prompt_tokens: int
    seconds: float
    forward: str = "early exit"
    """"early exit" (the circuit's layers and rows) or "full forward" (every layer)."""

    @property
    def tokens_per_exec(self) -> float:
        return len(self.generated) / max(1, len(self.steps))

    @property
    def tokens_per_second(self) -> float:
        """The tokens the model wrote over the launch's whole time, its prefill included."""
        return len(self.generated) / self.seconds if self.seconds > 0 else 0.0


class ModelBackend:
    """Runs launches on a Qwen3_5ForCausalLM that holds the machine (see machine.model)."""

    def __init__(
        self,
        machine: CompiledMachine,
        model: Any,
        token_offset: int,
        tokenizer: Any = None,
        bound: ExitBound | None = None,
    ) -> None:
        if token_offset <= PAD_TEXT_TOKEN:
            raise ArgError("the model's vocabulary must start with text tokens (batch padding)")
        self.machine = machine
        self.model = model
        self._bound = bound
        self.full_forward: bool | None = None
        """True: launches run every layer and the whole LM head; False: they stop after
        the circuit's layers (host.early_exit), refused where the bound fails; None (the
        default): early exit where the bound holds."""
        self._exit_model: Any = None
        self.tokenizer = tokenizer
        """The checkpoint's tokenizer, for text (the chat); None for the in-memory models,
        whose text rows are synthetic."""
        self.offset = token_offset
        self.vocab = machine.vocab
        self.fast_decode = True
        """Decode on the CPU with qwengpu's in-place delta-rule kernel (host.decode_kernel)
        over each layer's live part only (host.live_decode); False keeps transformers'
        modules and torch kernel."""
        self.circuit_only = False
        """True: `model` holds the circuit's layers alone (checkpoint_backend's
        circuit_only), so launches stop after them and the full forward is refused."""
        self.live_parts: Any = None
        """Each layer's live part (host.live_decode.LiveParts), found from the weights on
        the first CPU launch; LiveParts({}) runs every module's own forward."""

    def ids(self, tokens: Sequence[Token]) -> list[int]:
        return [self.offset + self.vocab.index[t] for t in tokens]

    @property
    def bound(self) -> ExitBound:
        """machine.exit_bound's proof on this model's weights (found on first use): early
        exit is exact where it holds."""
        if self._bound is None:
            self._bound = model_exit_bound(self.machine, self.model, self.offset)
        return self._bound

    def _runner(self, full_forward: bool | None = None) -> tuple[Any, int]:
        """The model a launch runs (the whole one, or the one cut after the circuit) and
        the token id of its logit 0; `full_forward` None: the backend's `full_forward`."""
        full = self.full_forward if full_forward is None else full_forward
        if full and self.circuit_only:
            raise LaunchError(
                "this checkpoint was loaded with the circuit's layers only (launches stop "
                "after them); load it with every layer to run the full forward"
            )
        if full or (full is None and not self.bound.proven):
            return self.model, 0
        if not self.bound.proven:
            raise LaunchError(
                "early exit is not exact on this model: "
                + self.bound.describe()
                + "; run the full forward (--full-forward)"
            )
        if self._exit_model is None:
            from qwengpu.host.early_exit import exit_model

            circuits = len(self.machine.layer_types)
            self._exit_model = exit_model(self.model, circuits, self.offset, len(self.vocab))
        return self._exit_model, self.offset

    def launch(
        self,
        program: Program,
        grid: int | Sequence[int],
        block: int | Sequence[int],
        args: Sequence[object],
        *,
        max_steps: int | None = None,
        prefill: bool = True,
        progress: Callable[[str], None] | None = None,
        full_forward: bool | None = None,
        shared_mem: int = 0,
    ) -> ModelLaunch:
        """Run one launch; arrays in `args` get their final contents.

        prefill=True feeds the load tokens in one forward (chunked DeltaNet path); False
        feeds them one by one with the cache (recurrent path). full_forward=True runs every
        layer and the whole LM head, False stops after the circuit (host.early_exit), None
        takes the backend's `full_forward`."""
        request = LaunchRequest(program, grid, block, args, shared_mem)
        (run,) = self.launch_many(
            [request],
            max_steps=max_steps,
            prefill=prefill,
            progress=progress,
            full_forward=full_forward,
        )
        return run

    def launch_many(
        self,
        requests: Sequence[LaunchRequest],
        *,
        max_steps: int | None = None,
        prefill: bool | Sequence[bool] = True,
        progress: Callable[[str], None] | None = None,
        full_forward: bool | None = None,
    ) -> list[ModelLaunch]:
        """Run independent launches as one batch (one sequence each, like CUDA streams):
        every forward pass advances all of them, so the weights are read once per step for
        the whole batch. `prefill` says, for every request or for each, how its load
        tokens go in: all in the first forward (the chunked DeltaNet path), or one per
        forward (the recurrent path). The first forwards take each row's whole prompt, or
        its first token, grouped by length: rows of similar lengths share a forward, the
        shorter ones left-padded with a text token and masked (the base's attention skips
        it, its DeltaNets read zeros; the circuit is muted on text anyway). From then on
        each row reads the rest of its own prompt, one token per pass, and starts writing
        when it has read it all, so no row waits on another's. A launch that ends has its
        states read and its row dropped from the cache, so the passes after it are the
        smaller batch's. Arrays in each request's args get their results. `full_forward`
        as in `launch`."""
        import torch

        from qwengpu.host.batch_cache import drop_rows, with_room_to_grow

        if not requests:
            return []
        feeds = [prefill] * len(requests) if isinstance(prefill, bool) else list(prefill)
        if len(feeds) != len(requests):
            raise ArgError(f"launch_many: {len(requests)} requests but {len(feeds)} prefill flags")
        jobs = [self._prepare(r) for r in requests]
        budget = max_steps if max_steps is not None else self.machine.spec.max_steps
        end_id = self.ids([token("END")])[0]
        prompts = [self.ids(j.prompt) for j in jobs]
        # what a launch's end leaves to read: its memory words (its whole states, about 50
        # MB a launch in float64, only when it trapped, for the message)
        final: dict[int, list[int]] = {}
        trapped: dict[int, dict[int, np.ndarray]] = {}
        model, first_id = self._runner(full_forward)
        device = model.device
        fast = self._cpu_decode() if self.fast_decode else contextlib.nullcontext(False)
        with torch.no_grad(), exact_arithmetic(), fast as cpu_path:
            # timed from here: the first launch's one-time setup (the cut model, each
            # layer's live parts found from the weights) is the module load, not the launch
            start = time.perf_counter()
            # the first forwards: each row's whole prompt, or its first token
            heads = [p if whole else p[:1] for p, whole in zip(prompts, feeds, strict=True)]
            cache, running, mask, logits = self._prefill(model, heads)
            if cpu_path:  # the base's keys and values extended in place, not concatenated
                with_room_to_grow(cache)
            fed = [len(h) for h in heads]
            # greedy decoding, one token per forward with the cache (the recurrent path);
            # running[r] is the job in cache row r; a row whose prompt is not all fed
            # (fed[b] tokens so far) takes its next prompt token, not the model's
            while True:
                picks = logits.argmax(-1).tolist()
                for b, pick in zip(running, picks, strict=True):
                    if fed[b] == len(prompts[b]):
                        self._take(jobs[b], first_id + pick, end_id, budget)
                if progress:
                    self._report(jobs, running, cache, progress)
                ended = [r for r, b in enumerate(running) if jobs[b].done]
                if ended:
                    states = self.recurrent_states(cache, ended)
                    for k, r in enumerate(ended):
                        b = running[r]
                        final[b] = self.read_memory(states, k)
                        if jobs[b].generated[-1].kind == "TRAP":
                            trapped[b] = {i: s[k : k + 1] for i, s in states.items()}
                    if len(ended) == len(running):
                        break
                    order = drop_rows(cache, ended, len(running))
                    running = [running[r] for r in order]
                    mask = None if mask is None else mask[order]
                step = []
                for b in running:
                    loading = fed[b] < len(prompts[b])
                    step.append([prompts[b][fed[b]] if loading else jobs[b].last_id])
                    fed[b] += loading
                if mask is not None:  # the prefills' padding stays hidden
                    mask = torch.cat([mask, mask.new_ones(len(running), 1)], dim=1)
                ids = torch.tensor(step, device=device)
                out = model(input_ids=ids, cache=cache, use_cache=True, attention_mask=mask)
                logits = out.logits[:, -1]
        seconds = time.perf_counter() - start
        for b, job in enumerate(jobs):  # a trap fails the batch before any copy-back
            if job.generated[-1].kind == "TRAP":
                where = f"launch {b} ('{job.name}'): " if len(jobs) > 1 else ""
                raise TrapError(where + self._trap_message(job, trapped[b]))
        launches = []
        for b, job in enumerate(jobs):
            words = final[b]
            copy_back(job.image, words)
            launches.append(
                ModelLaunch(
                    job.initial,
                    job.grid,
                    job.block,
                    words,
                    _steps(job.generated, self.machine.spec.lanes, job.grid),
                    job.generated,
                    len(job.prompt),
                    seconds,
                    "full forward" if model is self.model else "early exit",
                )
            )
        return launches

    def _prefill(self, model: Any, prompts: list[list[int]]) -> tuple[Any, list[int], Any, Any]:
        """The rows' first forwards onto an empty cache (the chunked DeltaNet path): the
        prompts (whole, or a token-by-token row's first token) grouped by length
        (prefill_groups), each group one forward with its shorter prompts left-padded and
        masked, the groups' caches joined into one batch. Returns the cache, the prompt of
        each cache row, the padding mask (1 on real tokens; None without padding) and each
        row's last logits."""
        import torch
        from transformers import DynamicCache

        from qwengpu.host.batch_cache import join_left_padded

        device = model.device
        width = max(map(len, prompts))
        caches, masks, logits, running = [], [], [], []
        for group in prefill_groups([len(p) for p in prompts]):
            longest = len(prompts[group[0]])
            ids = [[PAD_TEXT_TOKEN] * (longest - len(prompts[b])) + prompts[b] for b in group]
            mask = torch.tensor(
                [[0] * (width - len(prompts[b])) + [1] * len(prompts[b]) for b in group],
                device=device,
            )
            cache = DynamicCache(config=model.config)
            # the positions the group's tokens have in the joined batch (the widest
            # prefill's), so the base's rotary keys agree with the queries that follow
            positions = torch.arange(width - longest, width, device=device)
            out = model(
                input_ids=torch.tensor(ids, device=device),
                attention_mask=mask[:, width - longest :],
                position_ids=positions.expand(len(group), -1),
                cache=cache,
                use_cache=True,
                logits_to_keep=1,  # a prefill's other logits: (rows, width, vocab) unread
            )
            caches.append(cache)
            masks.append(mask)
            logits.append(out.logits[:, -1])
            running += group
        cache = join_left_padded(caches) if len(caches) > 1 else caches[0]
        mask = torch.cat(masks)
        return cache, running, None if bool(mask.all()) else mask, torch.cat(logits)

    @contextlib.contextmanager
    def _cpu_decode(self) -> Iterator[bool]:
        """qwengpu's decode kernel and the layers' live-part forwards, on the CPU only;
        yields whether they are installed."""
        import torch

        from qwengpu.host import decode_kernel  # needs torch, as the model does
        from qwengpu.host.live_decode import LiveParts

        with decode_kernel.installed(self.model) as on_cpu:
            if not on_cpu:
                yield False
                return
            if self.live_parts is None:  # found once: the weights do not change
                zero = torch.tensor(self.machine.compiled.schedule.mute_dims())
                circuit = range(len(self.machine.layer_types))
                self.live_parts = LiveParts.of(self.model, dict.fromkeys(circuit, zero))
            with self.live_parts.installed():
                yield True

    def _trap_message(self, job: _Job, states: dict[int, np.ndarray]) -> str:
        """The interpreter's words for the address trap the model ended a launch with: the
        step is the last EXEC, the stage, lane and reason are TRAP's, and the address is
        the lane's register a (read from the state, or where an earlier stage of the block
        wrote it, not known to the host) plus the instruction's offset."""
        spec = self.machine.spec
        trap = job.generated[-1]
        step = _steps(job.generated, spec.lanes, job.grid)[-1]
        stage, lane = trap.get("s"), trap.get("lane")
        instrs = job.program.blocks[step.block].instrs
        ins = instrs[stage]
        thread = step.warp * spec.lanes + lane
        if any(ins.a in earlier.writes() for earlier in instrs[:stage]):
            why = TRAP_REASONS[trap.get("why")]
            fault = (
                misaligned_fault(ins)
                if why == "misaligned"
                else outside_memory_fault(spec.memory_bytes)
            )
            return illegal_address_message(thread, step.cta, step.block, stage, ins, None, fault)
        address = (self.read_register(states, step.warp, lane, ins.a) + ins.imm) & WORD_MASK
        fault = address_fault(ins, address, spec.memory_bytes)
        if fault is None:
            raise LaunchError(f"the model trapped ({trap}) at the legal address {address:#x}")
        return illegal_address_message(thread, step.cta, step.block, stage, ins, address, fault)

    def _prepare(self, request: LaunchRequest) -> _Job:
        grid3, block3 = dim3(request.grid, "grid"), dim3(request.block, "block")
        program = request.program
        check_geometry(program, grid3, block3)
        threads, ctas = math.prod(block3), math.prod(grid3)
        if threads > MAX_NTID or ctas > MAX_CTAS:
            raise ArgError(
                f"the model backend runs at most {MAX_NTID} threads per CTA and {MAX_CTAS} CTAs; "
                f"block {block3} has {threads} threads, grid {grid3} has {ctas} CTAs"
            )
        image = build_memory(program, request.args, request.shared_mem)
        prompt = load_tokens(self.machine, program, image.words, block3, grid3)
        prompt.append(token("CTA", x=0, y=0, z=0))
        return _Job(
            program.name, program, tuple(grid3), tuple(block3), image, list(image.words), prompt
        )

    def _take(self, job: _Job, next_id: int, end_id: int, budget: int) -> None:
        """Append the model's next token to a launch; raise on a runaway or stray token."""
        t = self._token(next_id, job.name)
        job.generated.append(t)
        job.last_id = next_id
        if t.kind == "CTA":
            job.cta = cta_number(t, job.grid)
        job.execs += t.kind == "EXEC"
        job.since_exec = 0 if t.kind == "EXEC" else job.since_exec + 1
        job.done = next_id == end_id or t.kind == "TRAP"
        if job.done:
            return
        if job.execs > budget:
            raise LaunchError(
                f"launch of '{job.name}' ran past its step budget of {budget} EXEC steps "
                f"(last token {t}); raise max_steps if the kernel is meant to run longer"
            )
        limit = tokens_between_execs(self.machine.spec)
        if job.since_exec > limit:
            raise LaunchError(
                f"launch of '{job.name}': the model wrote {job.since_exec} tokens since its "
                f"last EXEC, more than any step writes back ({limit}; last token {t})"
            )

    def _report(
        self,
        jobs: Sequence[_Job],
        running: Sequence[int],
        cache: Any,
        progress: Callable[[str], None],
    ) -> None:
        """Progress every PROGRESS_EVERY EXEC steps of a launch, and when it ends; the
        running jobs (running[r] in cache row r) are in the cache."""
        reporting = []  # the cache rows of the launches due, read from the cache at once
        for row, b in enumerate(running):
            job = jobs[b]
            t = job.generated[-1] if job.generated else None
            due = t is not None and (t.kind == "EXEC" and job.execs % PROGRESS_EVERY == 0)
            if not job.reported and (due or job.done):
                reporting.append(row)
        if not reporting:
            return
        states = self.recurrent_states(cache, reporting)
        for k, row in enumerate(reporting):
            job = jobs[running[row]]
            job.reported = job.done
            threads = math.prod(job.block)
            done = self.warps_done(states, threads, k)
            name = f"{job.name}: " if len(jobs) > 1 else ""
            progress(
                f"{name}CTA {job.cta + 1}/{math.prod(job.grid)}: {done}/{self._warps(threads)} "
                f"warps done; {job.execs} EXEC steps, {len(job.generated)} tokens"
            )

    def _token(self, token_id: int, launch: str = "") -> Token:
        index = token_id - self.offset
        if not 0 <= index < len(self.vocab):
            raise LaunchError(
                f"the model emitted a text token (id {token_id}) inside the launch of '{launch}'"
            )
        return self.vocab.tokens[index]

    def recurrent_states(
        self, cache: Any, rows: Sequence[int] | None = None
    ) -> dict[int, np.ndarray]:
        """The circuit layers' DeltaNet states in the cache, by layer, as float64 arrays
        (batch first): every row, or the cache rows `rows` in that order. A layer whose
        heads are all idle holds none on the CPU path (host.live_decode): it is left out."""
        states = {}
        for i, kind in enumerate(self.machine.layer_types):
            if kind == "linear_attention":
                s = cache.layers[i].recurrent_states
                if isinstance(s, dict):  # transformers keys the state by sequence slot
                    s = s.get(0)
                if s is not None:
                    s = s if rows is None else s[list(rows)]
                    states[i] = s.double().cpu().numpy()
        return states

    def _warps(self, ntid: int) -> int:
        return -(-ntid // self.machine.spec.lanes)

    def warps_done(self, states: dict[int, np.ndarray], ntid: int, batch: int = 0) -> int:
        """Warps of the current CTA whose lanes have all exited, from the scheduler's live
        bits in the recurrent states (`recurrent_states(cache)`; for the progress display)."""
        lanes, done = self.machine.spec.lanes, 0
        for w in range(self._warps(ntid)):
            threads = range(w * lanes, min(ntid, (w + 1) * lanes))
            rows = [self.machine.compiled.memory_rows(states, f"sched{t}") for t in threads]
            done += not any(int(r[batch, 0, -1]) for r in rows)  # the live column is the last
        return done

    def read_register(
        self, states: dict[int, np.ndarray], warp: int, lane: int, reg: int, batch: int = 0
    ) -> int:
        """One register of one thread, from its lane's register file in the state."""
        row = reg + (warp << self.machine.vocab.layout.reg_bits)
        return _words(self.machine.compiled.memory_rows(states, f"regs{lane}")[batch])[row]

    def read_memory(self, states: dict[int, np.ndarray], batch: int = 0) -> list[int]:
        """Final memory words of one sequence, from the first copy of the memory in the
        recurrent states (`recurrent_states(cache)`)."""
        return _words(self.machine.compiled.memory_rows(states, "mem0")[batch])


def model_exit_bound(machine: CompiledMachine, model: Any, first: int) -> ExitBound:
    """machine.exit_bound on a loaded model: its LM head's rows but the circuit tokens'
    behind its final norm."""
    head = model.lm_head.weight.detach()
    end = first + len(machine.vocab)
    others = (head[:first], head[end:])
    return exit_bound(machine, others, head[first:end], model.model.norm.weight.detach())


PREFILL_FILL = 0.75
"""A prefill group's shortest prompt is at least this fraction of its longest: at most a
quarter of a group's positions are padding (the suite's prompts, 90 to 558 tokens, padded
to the longest as one group, were 60% padding), at the cost of one forward per group."""


def prefill_groups(lengths: Sequence[int]) -> list[list[int]]:
    """The prompts (by index) in groups for prefilling, longest first: a prompt joins the
    current group while it is at least PREFILL_FILL of the group's longest."""
    groups: list[list[int]] = []
    for b in sorted(range(len(lengths)), key=lambda b: -lengths[b]):
        if groups and lengths[b] >= PREFILL_FILL * lengths[groups[-1][0]]:
            groups[-1].append(b)
        else:
            groups.append([b])
    return groups


def _words(rows: np.ndarray) -> list[int]:
    """32-bit words from memory rows of bit channels (bit i in channel i)."""
    return [int(v) for v in (rows * (1 << np.arange(32, dtype=np.int64))).sum(axis=-1)]


def checkpoint_backend(
    directory: str | Path,
    dtype: str = "float32",
    device: str | None = None,
    *,
    circuit_only: bool = False,
) -> ModelBackend:
    """A ModelBackend on a checkpoint from `qgpu build --circuit machine`, loaded with plain
    transformers. The manifest names the machine (MachineSpec, compiler version, geometry);
    its layout is rebuilt here (the schedule is deterministic) and checked against the
    checkpoint's layer types and circuit token ids. `circuit_only` loads the circuit's
    layers alone, all that early exit runs (the 2B checkpoint in float32: about 14 GB
    instead of 26): launches only, where the manifest records a proven early exit."""
    from qwengpu.machine.model import machine_layout
    from qwengpu.model.machine_circuit import (
        MACHINE_COMPILER_VERSION,
        geometry_from_record,
        token_string,
    )
    from qwengpu.model.manifest import load_checkpoint, read_manifest, spec_from_dict

    if dtype not in ("float32", "bfloat16"):
        raise ArgError(f"--dtype {dtype}: the machine is exact in float32 and bfloat16 only")
    manifest = read_manifest(Path(directory))
    extra = manifest.get("circuit", {}).get("extra", {})
    if extra.get("circuit") != "machine":
        raise CheckpointError(
            f"{directory} holds no qgpu machine (circuit: {extra.get('circuit')!r}); build "
            "one with `qgpu build --circuit machine`"
        )
    spec = spec_from_dict(manifest["machine_spec"])
    recorded = manifest["circuit"].get("early_exit")
    circuits = len(manifest["circuit"]["layer_types"]) if circuit_only and recorded else None
    model, tokenizer, manifest = load_checkpoint(
        directory, spec, MACHINE_COMPILER_VERSION, dtype=dtype, layers=circuits
    )
    machine = machine_layout(geometry_from_record(extra["geometry"]), spec)
    circuit_types = manifest["circuit"]["layer_types"]
    if circuit_types != machine.layer_types:
        raise CheckpointError(
            f"{directory}: its {len(circuit_types)} circuit layers do not match the machine's "
            f"layout ({len(machine.layer_types)} layers); rebuild it with `qgpu build`"
        )
    ids = manifest["circuit"]["tokens"]
    first = ids.get(token_string(machine.vocab.tokens[0]))
    for i, t in enumerate(machine.vocab.tokens):
        if ids.get(token_string(t)) != first + i:
            raise CheckpointError(f"{directory}: circuit token {t} is missing or out of place")
    bound = _checkpoint_bound(directory, machine, model, first, recorded)
    backend = ModelBackend(machine, model.to(pick_device(device)), first, tokenizer, bound)
    backend.circuit_only = circuits is not None
    return backend


def _checkpoint_bound(
    directory: str | Path, machine: CompiledMachine, model: Any, first: int, recorded: Any
) -> ExitBound:
    """A checkpoint's early-exit bound: the build's record, whose other side (a product over
    the whole LM head and every output code: most of a minute on 2B) holds for these
    weights because load_checkpoint checked every tensor's sha256; the circuit side is
    recomputed, which also checks that the rows are this machine's. Without a record, all
    of it is recomputed."""
    if recorded is None:
        return model_exit_bound(machine, model, first)
    rows = model.lm_head.weight.detach()[first : first + len(machine.vocab)]
    circuit_min = circuit_logit_min(machine, rows, model.model.norm.weight.detach())
    if not math.isclose(recorded["circuit_logit_min"], circuit_min, rel_tol=1e-9):
        raise CheckpointError(
            f"{directory}: its LM head or final norm differ from the build's (the right "
            f"circuit token scores at least {recorded['circuit_logit_min']:.6g} at build, "
            f"{circuit_min:.6g} now); rebuild it with `qgpu build`"
        )
    return ExitBound(recorded["other_logit_max"], circuit_min)


def pick_device(name: str | None = None) -> str:
    """`name`, checked to be present, else CUDA when present, else MPS when present, else
    the CPU. Called before anything is loaded, so a missing device costs no time."""
    import torch

    mps = getattr(torch.backends, "mps", None)
    has_mps = mps is not None and mps.is_available()
    if not name:
        return "cuda" if torch.cuda.is_available() else "mps" if has_mps else "cpu"
    kind, _, index = name.partition(":")
    if kind == "cpu" and not index:
        return name
    if kind == "cuda":
        if not torch.cuda.is_available():
            why = (
                "this PyTorch build has no CUDA"
                if torch.version.cuda is None
                else "no NVIDIA GPU or driver was found"
            )
            raise ArgError(f"--device {name}: {why}; use --device cpu")
        if index and not (index.isdigit() and int(index) < torch.cuda.device_count()):
            count = torch.cuda.device_count()
            raise ArgError(f"--device {name}: this machine has {count} CUDA device(s)")
        return name
    if kind == "mps" and not index:
        if not has_mps:
            raise ArgError(f"--device {name}: no Apple GPU (MPS) is usable here; use --device cpu")
        return name
    raise ArgError(f"--device {name}: choose cuda, cuda:N, mps or cpu")


MEMORY_MODELS = {"memory": "0.8b", "memory:0.8b": "0.8b", "memory:2b": "2b"}
"""`--model memory[:GEOMETRY]`: the machine and a few random base layers, built in memory
(no checkpoint, no download; for tests and demos). Plain "memory" is the 0.8B geometry
with the reduced preset: the fastest to build and to run."""


def model_backend(
    model: str | Path | None = None,
    *,
    dtype: str = "float32",
    base: str | None = None,
    device: str | None = None,
    progress: Callable[[str], None] | None = None,
    circuit_only: bool = False,
) -> ModelBackend:
    """The backend for `--model`: a checkpoint directory, "memory[:0.8b|:2b]", or (None)
    the default checkpoint in the user cache, built from `base` on first use
    (docs/model.md). `circuit_only`: a checkpoint may be loaded with the circuit's layers
    alone (launches with early exit only; checkpoint_backend)."""
    device = pick_device(device)
    if isinstance(model, str) and model in MEMORY_MODELS:
        return default_backend(dtype, MEMORY_MODELS[model], device)
    if model is None:
        from qwengpu.model.defaults import ensure_checkpoint
        from qwengpu.model.machine_circuit import MachineCircuitCompiler

        model = ensure_checkpoint(MachineCircuitCompiler(), base, progress=progress)
    key = f"{Path(model).expanduser().absolute()}:{dtype}:{device}"
    loaded = _checkpoints.get(key)
    if loaded is None or (loaded.circuit_only and not circuit_only):
        _checkpoints.clear()  # one loaded checkpoint at a time: they are several GB
        path = Path(model).expanduser()
        loaded = checkpoint_backend(path, dtype, device, circuit_only=circuit_only)
        _checkpoints[key] = loaded
    return loaded


DEFAULT_BASE_LAYERS = 4
DEFAULT_TEXT_ROWS = 2048
DEFAULT_TEXT_MEAN = 1.0  # common-mean strength of the synthetic text rows (physics.md)
_backends: dict[tuple[str, str, str], ModelBackend] = {}  # in-memory: dtype, geometry, device
_checkpoints: dict[str, ModelBackend] = {}  # the loaded checkpoint, by path, dtype, device


def default_backend(
    dtype: str = "float32", geometry: str = "0.8b", device: str | None = None
) -> ModelBackend:
    """The in-memory model backend: the machine compiled for a Qwen3.5 geometry ("0.8b":
    the reduced preset, "2b": the full one), followed by random base layers of that
    geometry and a synthetic text embedding (realistic statistics), muted against it, on
    `device` (default: pick_device's). Built once per process (0.8b: about 40 s, 2b: about
    2 minutes on 2 CPU cores)."""
    from qwengpu.circuit import GEOMETRIES

    if dtype not in ("float32", "bfloat16"):
        raise ArgError(f"--dtype {dtype}: the machine is exact in float32 and bfloat16 only")
    shapes = GEOMETRIES.get(f"qwen3.5-{geometry}")
    if shapes is None or geometry not in MEMORY_MODELS.values():
        raise ArgError(f"--model memory:{geometry}: choose memory:0.8b or memory:2b")
    import torch

    device = pick_device(device)
    key = (dtype, geometry, device)
    if key in _backends:
        return _backends[key]
    from qwengpu.circuit.mute import synthetic_embedding
    from qwengpu.machine.model import build_launch_model, compile_machine

    _backends.clear()  # one in-memory model at a time: they are several GB
    print(
        f"qgpu: building the machine model in memory (Qwen3.5-{geometry} geometry, "
        f"{DEFAULT_BASE_LAYERS} synthetic base layers, {dtype}, on {device})...",
        file=sys.stderr,
        flush=True,
    )
    text = _default_text(synthetic_embedding, shapes.hidden)
    if shapes.name not in _machines:
        _machines.clear()
        _machines[shapes.name] = compile_machine(shapes, embedding=text)
    machine = _machines[shapes.name]
    model, offset = build_launch_model(
        machine, text, base_layers=DEFAULT_BASE_LAYERS, dtype=getattr(torch, dtype)
    )
    _backends[key] = ModelBackend(machine, model.to(device), offset)
    return _backends[key]


def _default_text(synthetic_embedding, hidden: int) -> np.ndarray:
    rows = synthetic_embedding(DEFAULT_TEXT_ROWS, hidden, seed=1, mean_ratio=DEFAULT_TEXT_MEAN)
    return rows.float().numpy().astype(np.float64)


_machines: dict[str, CompiledMachine] = {}


def cta_number(t: Token, grid: Dim3) -> int:
    """The linear number of the CTA a CTA(x, y, z) token starts (x fastest)."""
    gx, gy, _ = grid
    return t.get("x") + gx * (t.get("y") + gy * t.get("z"))


def _steps(generated: Sequence[Token], lanes: int, grid: Dim3) -> list[ModelStep]:
    steps: list[ModelStep] = []
    cta = 0
    for t in generated:
        if t.kind == "CTA":
            cta = cta_number(t, grid)
        if t.kind == "EXEC":
            active = tuple(lane for lane in range(lanes) if (t.get("mask") >> lane) & 1)
            steps.append(ModelStep(cta, t.get("w"), t.get("b"), active))
        if steps:
            steps[-1].tokens.append(t)
    return steps


def stderr_progress(message: str) -> None:
    """One progress line, rewritten in place on a terminal (the caller ends it with a
    newline, `end_progress`); one line per report elsewhere (logs, pipes)."""
    if sys.stderr.isatty():
        print(f"\r\033[K{message}", end="", file=sys.stderr, flush=True)
    else:
        print(message, file=sys.stderr, flush=True)


def end_progress() -> None:
    if sys.stderr.isatty():
        print(file=sys.stderr, flush=True)
