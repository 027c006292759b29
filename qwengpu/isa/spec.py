"""MachineSpec: the single source of truth for the lowering, the interpreter and the circuit."""

from __future__ import annotations

from dataclasses import asdict, dataclass

WORD_BITS = 32
WORD_MASK = (1 << WORD_BITS) - 1
WORD_BYTES = WORD_BITS // 8


def index_3d(linear: int, shape: tuple[int, int, int]) -> tuple[int, int, int]:
    """(x, y, z) of the linear-th thread of a CTA (or CTA of a grid) of `shape`: x
    fastest, as CUDA numbers threads into warps and the interpreter runs CTAs."""
    x, y, _ = shape
    return linear % x, (linear // x) % y, linear // (x * y)


@dataclass(frozen=True)
class MachineSpec:
    """The shape of one qgpu machine.

    Every limit the lowering enforces, every loop bound of the interpreter and every
    table the circuit compiler sizes comes from one of these fields.
    """

    lanes: int = 4  # threads per warp
    registers: int = 16  # register rows per lane; r0 always reads zero
    predicates: int = 4  # 1-bit predicate registers per lane
    rom_blocks: int = 32  # program ROM: blocks
    block_size: int = 4  # instructions per block = pipeline stages = one forward pass
    memory_words: int = 126  # 32-bit words of memory (params, shared, global)
    warps: int = 4  # warps per CTA: at most warps * lanes threads per CTA
    loads_per_block: int = 4  # LD per block: the memory is read at each pipeline stage
    stores_per_block: int = 1  # ST/ATOM per block, after its loads: one write port per pass
    stores_alone: bool = False  # a ST/ATOM block holds nothing else (the model's machines
    # serve a store's lanes one per pass, re-running the block on each lane's pass)
    max_grid_ctas: int = 16  # CTAs per launch (they run one after another)
    max_steps: int = 4096  # default step budget of one launch (one step = one block)
    mul_high: bool = True  # the ALU has mulhu/mulhs; without, the lowering expands them

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, bool) and value < 1:
                raise ValueError(f"MachineSpec.{name} must be >= 1, got {value}")
        if self.registers < 2:
            raise ValueError("MachineSpec.registers must be >= 2 (r0 is the zero register)")

    @property
    def usable_registers(self) -> int:
        """Registers a program may write: r1 .. r{registers-1}."""
        return self.registers - 1

    @property
    def threads_per_cta(self) -> int:
        return self.warps * self.lanes

    @property
    def memory_bytes(self) -> int:
        return self.memory_words * WORD_BYTES

    def describe(self) -> str:
        return (
            f"{self.lanes}-lane warps x {self.warps} warps/CTA, "
            f"{self.usable_registers}+r0 registers, {self.predicates} predicates, "
            f"ROM {self.rom_blocks} blocks x {self.block_size} instructions, "
            f"{self.memory_words} memory words"
        )


DEFAULT_SPEC = MachineSpec()
