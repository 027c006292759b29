"""The launch token vocabulary: every circuit token, its input fields and its output code.

A token is a kind plus a payload (docs/protocol.md). Its embedding sets the circuit's input
fields (`input_values`); when the circuit wants the model to emit it, the circuit's output
fields hold its code (`output_values`), and its output row scores that code.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from qwengpu.isa.spec import MachineSpec, index_3d
from qwengpu.machine.rom import RomLayout

WORD_BYTES = 4
ADDR_BITS = 7  # memory word index (memory_words <= 127)

# kind: (payload names) ; see docs/protocol.md
KINDS: dict[str, tuple[str, ...]] = {
    "EXEC": ("b", "w", "mask"),  # run block b for warp w, lanes in mask
    # byte k of stage s's register write-back (lane sel, lanes = all)
    "BREG": ("s", "sel", "k", "v"),
    "FREG": ("s", "sel", "n", "v"),  # last byte (the n-th) of a register write-back: commits it
    "BAMEM": ("k", "v"),  # byte k of the word a store/atomic writes to memory
    # last byte: commits it to the memory lane's a + imm (lane L: the host's memory load, to
    # memory[MADDR]); its pass serves the next executing lane
    "FAMEM": ("lane", "n", "v"),
    "PRED": ("s", "pv", "pw"),  # stage s's predicate write-back: values, lanes written
    "MADDR": ("addr",),  # memory word that the host's next FAMEM writes (host only)
    "ROMSEL": ("romb",),  # ROM block that the next ROMBYTE tokens write (host only)
    "ROMBYTE": ("romk", "v"),  # byte romk of that block's ROM row (host only)
    "BAR": (),  # every live warp of the CTA waits at a barrier: release them
    # stage s's lane's address is misaligned (why 0) / outside memory (1): the end
    "TRAP": ("s", "lane", "why"),
    "CTA": ("x", "y", "z"),  # start the CTA %ctaid = (x, y, z); CTA(0, 0, 0) starts a launch
    "BLOCK": ("x", "y", "z"),  # the CTA shape %ntid (host only)
    "GRID": ("x", "y", "z"),  # the grid shape %nctaid (host only)
    "END": (),  # the launch is over
}
KIND_NAMES = tuple(KINDS)
HOST_ONLY = frozenset({"ROMSEL", "ROMBYTE", "MADDR", "BLOCK", "GRID"})
BYTE_KINDS = ("BREG", "BAMEM")
MAX_NTID = 16  # threads per CTA
MAX_CTAS = 16  # CTAs per launch
DIM_BITS = 5  # a dimension of a shape: 1..16
INDEX_BITS = 4  # a thread's or CTA's index along one dimension: 0..15
AXES = ("x", "y", "z")
TRAP_REASONS = ("misaligned", "outside memory")  # TRAP's why: 0, 1
MAX_LANES = 4  # EXEC masks and PRED values grow as 2^lanes and 3^lanes tokens per warp


@dataclass(frozen=True)
class Token:
    kind: str
    payload: tuple[tuple[str, int], ...] = ()

    def get(self, name: str, default: int = 0) -> int:
        return dict(self.payload).get(name, default)

    def __str__(self) -> str:
        args = ",".join(f"{k}={v}" for k, v in self.payload)
        return f"{self.kind}({args})"


def shapes(limit: int) -> Iterator[tuple[int, int, int]]:
    """Every (x, y, z) of positive dimensions with x * y * z <= limit."""
    for x in range(1, limit + 1):
        for y in range(1, limit // x + 1):
            for z in range(1, limit // (x * y) + 1):
                yield x, y, z


def token(kind: str, **payload: int) -> Token:
    names = KINDS[kind]
    if set(payload) != set(names):
        raise ValueError(f"{kind} takes {names}, got {sorted(payload)}")
    return Token(kind, tuple((n, payload[n]) for n in names))


@dataclass
class Vocabulary:
    """All circuit tokens for a MachineSpec, in a fixed order (id = offset + index)."""

    spec: MachineSpec
    tokens: list[Token] = field(default_factory=list)
    index: dict[Token, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.spec.lanes > MAX_LANES:
            raise ValueError(f"at most {MAX_LANES} lanes per warp, spec has {self.spec.lanes}")
        if self.spec.memory_words >= 1 << ADDR_BITS:
            raise ValueError(f"memory_words must be below {1 << ADDR_BITS}")
        self.tokens = list(self._enumerate())
        self.index = {t: i for i, t in enumerate(self.tokens)}

    @property
    def layout(self) -> RomLayout:
        return RomLayout(self.spec)

    @property
    def lanes(self) -> int:
        return self.spec.lanes

    @property
    def all_lanes(self) -> int:
        """The write selector "every active lane" (the uniform write-back): one past the
        last lane."""
        return self.spec.lanes

    @property
    def threads(self) -> int:
        """Threads per CTA the tokens can launch."""
        return min(self.spec.threads_per_cta, MAX_NTID, self.spec.warps * self.spec.lanes)

    @property
    def warp_bits(self) -> int:
        return max(1, (self.spec.warps - 1).bit_length())

    def _enumerate(self) -> Iterator[Token]:
        s = self.spec
        lanes = s.lanes
        for b in range(s.rom_blocks):
            for w in range(s.warps):
                for mask in range(1, 1 << lanes):
                    yield token("EXEC", b=b, w=w, mask=mask)
        stages = range(s.block_size)
        for stage in stages:
            for sel in range(lanes + 1):
                for k in range(WORD_BYTES - 1):
                    for v in range(256):
                        yield token("BREG", s=stage, sel=sel, k=k, v=v)
                for n in range(1, WORD_BYTES + 1):
                    for v in range(256):
                        yield token("FREG", s=stage, sel=sel, n=n, v=v)
        for k in range(WORD_BYTES - 1):
            for v in range(256):
                yield token("BAMEM", k=k, v=v)
        for lane in range(lanes + 1):
            for n in range(1, WORD_BYTES + 1):
                for v in range(256):
                    yield token("FAMEM", lane=lane, n=n, v=v)
        for stage in stages:
            for pw in range(1, 1 << lanes):
                for pv in range(1 << lanes):
                    if pv & ~pw == 0:
                        yield token("PRED", s=stage, pv=pv, pw=pw)
        for addr in range(s.memory_words):
            yield token("MADDR", addr=addr)
        for b in range(s.rom_blocks):
            yield token("ROMSEL", romb=b)
        for k in range(self.layout.rom_bytes):
            for v in range(256):
                yield token("ROMBYTE", romk=k, v=v)
        yield token("BAR")
        for stage in stages:
            for lane in range(lanes):
                for why in range(len(TRAP_REASONS)):
                    yield token("TRAP", s=stage, lane=lane, why=why)
        ctas = min(s.max_grid_ctas, MAX_CTAS)
        for x, y, z in shapes(ctas):  # index (x-1, y-1, z-1) of a grid of x * y * z CTAs
            yield token("CTA", x=x - 1, y=y - 1, z=z - 1)
        for x, y, z in shapes(self.threads):
            yield token("BLOCK", x=x, y=y, z=z)
        for x, y, z in shapes(ctas):
            yield token("GRID", x=x, y=y, z=z)
        yield token("END")

    def __len__(self) -> int:
        return len(self.tokens)

    def is_host_store(self, t: Token) -> bool:
        """The host's memory-load word (FAMEM with lane L), which the model never emits."""
        return t.kind == "FAMEM" and t.get("lane") == self.lanes

    # -- what the circuit sees -----------------------------------------------------------------
    def input_values(self, t: Token) -> dict[str, int | list[int]]:
        """The circuit input fields this token's embedding sets (others are 0)."""
        v: dict[str, int | list[int]] = {f"is_{t.kind.lower()}": 1}
        p = dict(t.payload)
        if t.kind == "EXEC":
            v.update(t_b=p["b"], t_w=p["w"], t_mask=p["mask"])
        if "v" in p:
            v["t_v"] = p["v"]
        if "sel" in p:
            v["t_sel"] = p["sel"]
        if "s" in p:
            v["t_s"] = p["s"]
        if "k" in p:
            v["t_k"] = p["k"]
            v[f"stg_we{p['k']}"] = 1
        if "n" in p:
            v["t_n"] = p["n"] - 1
        if t.kind == "PRED":
            for lane in range(self.lanes):
                v[f"pv{lane}"] = (p["pv"] >> lane) & 1
                v[f"pw{lane}"] = (p["pw"] >> lane) & 1
        if t.kind == "MADDR":
            v["t_addr"] = p["addr"]
        if t.kind == "ROMSEL":
            v["t_romb"] = p["romb"]
        if t.kind == "ROMBYTE":
            v[f"rom_we{p['romk']}"] = 1
        if t.kind == "FAMEM" and not self.is_host_store(t):  # the host's names no lane
            v["t_lane"] = p["lane"]
        if t.kind == "CTA":
            v.update({f"t_cta_{a}": p[a] for a in AXES})
        if t.kind in ("BLOCK", "GRID"):
            shape = tuple(p[a] for a in AXES)
            prefix = "t_ntid" if t.kind == "BLOCK" else "t_nctaid"
            v[prefix] = shape[0] * shape[1] * shape[2]
            v.update({f"{prefix}_{a}": p[a] for a in AXES})
        if t.kind == "BLOCK":  # every thread's %tid, packed x | y << 4 | z << 8
            v["t_tids"] = [
                sum(i << (INDEX_BITS * k) for k, i in enumerate(index_3d(thread, shape)))
                for thread in range(self.threads)
            ]
        return v

    def output_values(self, t: Token) -> dict[str, int] | None:
        """The code the circuit's output fields hold when it emits this token (None for
        tokens only the host sends)."""
        if t.kind in HOST_ONLY or self.is_host_store(t):
            return None
        p = dict(t.payload)
        out = {"o_kind": KIND_NAMES.index(t.kind)}
        if t.kind == "EXEC":
            out.update(o_b=p["b"], o_w=p["w"], o_mask=p["mask"])
        if "sel" in p:
            out["o_sel"] = p["sel"]
        if "s" in p:
            out["o_s"] = p["s"]
        if "k" in p:
            out["o_k"] = p["k"]
        if "n" in p:
            out["o_n"] = p["n"] - 1
        if "v" in p:
            out["o_v"] = p["v"]
        if t.kind == "PRED":
            out.update(o_pv=p["pv"], o_pw=p["pw"])
        if t.kind == "MADDR":
            out["o_addr"] = p["addr"]
        if t.kind in ("FAMEM", "TRAP"):
            out["o_lane"] = p["lane"]
        if t.kind == "TRAP":
            out["o_why"] = p["why"]
        if t.kind == "CTA":
            out.update({f"o_cta_{a}": p[a] for a in AXES})
        return out
