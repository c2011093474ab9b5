"""The Ethos-U NPU families (U55, U65, U85) as the compiler knows them: one table, ROWS.

Each row is one difference between the families: an op that only some support, a workaround
for what Vela 5.2.0 gets wrong on some, a form Vela runs faster on some, or a lowering choice
whose first guess differs. A row names the families it applies to (for a choice: those whose
first guess takes it), says why in one sentence and names the test that pins it. The stages
below the command line ask the target's NpuFamily (kiln.boards.Target.npu) whether a row
applies (NpuFamily.has), never a target's name: the lowering (kiln.lower) and the support
rules (kiln.partition.support). bench/lowering_choices.py prints Vela's figures behind the
rows marked `measured`; tests/compiler/test_families.py checks that every row's test exists
and that every row is used.

Adding a workaround for one family is one row here, its test, and the line of the lowering
or the support rule that asks for it (docs/adding-an-operator.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

U55, U65, U85 = "ethos-u55", "ethos-u65", "ethos-u85"
NAMES = (U55, U65, U85)


class Kind(Enum):
    SUPPORT = "support"  # the families that can run something; a support rule keeps it off the others
    WORKAROUND = "workaround"  # the families where Vela 5.2.0 needs another graph to compute the right thing
    FASTER = "faster"  # the families where Vela 5.2.0 estimates another equivalent graph faster
    CHOICE = "choice"  # the families whose first guess takes the choice; kiln.compile.fastest tries both


@dataclass(frozen=True)
class Row:
    name: str  # for a choice, its name in a compile report's flipped_choices
    kind: Kind
    families: frozenset[str]
    why: str
    test: str  # the pytest node id of the test that pins it
    measured: bool = False  # bench/lowering_choices.py compiles both forms and prints Vela's figures


ROWS: list[Row] = []


def _row(name: str, kind: Kind, families: tuple[str, ...], why: str, test: str, measured: bool = False) -> Row:
    row = Row(name, kind, frozenset(families), why, test, measured)
    ROWS.append(row)
    return row


# ---- what each family supports ------------------------------------------------------------------
SELECTS = _row(
    "selects",
    Kind.SUPPORT,
    (U85,),
    "Vela 5.2.0 places comparisons, logical ops (any, all among them) and selects on Ethos-U85 only.",
    "tests/compiler/test_lowering_select.py::test_select_matches_pt2e_on_the_u85_and_its_npu_model",
)
DMA_GATHERS = _row(
    "dma_gathers",
    Kind.SUPPORT,
    (U85,),
    "Vela 5.2.0 places TOSA GATHER (the DMA's indexed mode) on Ethos-U85 only.",
    "tests/compiler/test_lowering_gather.py::test_the_u85_model_runs_vela_s_gathers_to_tosa_reference_model_s_bytes",
)
DMA_SCATTERS = _row(
    "dma_scatters",
    Kind.SUPPORT,
    (U85,),
    "Vela 5.2.0 places TOSA SCATTER (a copy, then the DMA's indexed mode writing the rows) on Ethos-U85 only.",
    "tests/compiler/test_lowering_scatter.py::test_the_u85_model_runs_vela_s_scatters_to_tosa_reference_model_s_bytes",
)
INT16_MATMUL = _row(
    "int16_matmul",
    Kind.SUPPORT,
    (U85,),
    "Ethos-U55 and U65 have no 16-bit matrix multiply: Vela 5.2.0 refuses a 16-bit MATMUL there.",
    "tests/compiler/test_vela_refusal.py::test_an_op_vela_refuses_runs_on_the_cpu_with_velas_reason",
)
INT16_TRANSPOSE_CONV = _row(
    "int16_transpose_conv",
    Kind.SUPPORT,
    (U85,),
    "Vela 5.2.0 cannot place a 16-bit TRANSPOSE_CONV2D on Ethos-U55 or U65.",
    "tests/compiler/test_lowering.py::test_int16_op_matches_pt2e_within_one_step",
)
HARDWARE_RESIZE = _row(
    "hardware_resize",
    Kind.SUPPORT,
    (U85,),
    "Vela 5.2.0 runs a TOSA RESIZE on Ethos-U85's resize hardware for any whole factors and any size (faster "
    "there than kiln's depthwise bilinear); on Ethos-U55/U65 only nearest upsampling by 2, 4 or 8 both ways.",
    "tests/compiler/test_lowering.py::test_bilinear_to_any_size_runs_on_the_u85_model_as_tosa_reference_model_and_"
    "stays_off_the_u55",
    measured=True,
)

# ---- workarounds: what Vela 5.2.0 gets wrong ------------------------------------------------------
OFFSET_COPIES = _row(
    "offset_copies",
    Kind.WORKAROUND,
    (U55, U65),
    "Vela 5.2.0 writes a RESCALE from 32 or 48 bits that it cannot fold into its producer at offset 0 of the "
    "CONCAT or PAD it feeds, so the lowering copies such an operand first (Lowerer.placeable).",
    "tests/simulator/test_npu_concat_offsets.py::test_vela_places_a_standalone_rescale_at_offset_zero",
)
SLICE_WIDEN_COPIES = _row(
    "slice_widen_copies",
    Kind.WORKAROUND,
    (U55, U65),
    "Vela 5.2.0 rewrites the widening RESCALEs of two slices of one tensor into reads of the whole tensor from "
    "its start, so the lowering copies such slices first (Lowerer.widen).",
    "tests/simulator/test_npu_slice_offsets.py::test_vela_widening_rescale_of_slices_reads_and_writes_the_whole_input",
)
MIN_AS_MAX = _row(
    "min_as_max",
    Kind.WORKAROUND,
    (U55, U65),
    "Vela 5.2.0 builds REDUCE_MIN as pivot - max(pivot - x), wrong when its result is reshaped onto other axes, "
    "so amin is lowered as ~max(~x) (Ethos-U85 reduces by min itself).",
    "tests/simulator/test_npu_reduce_min.py::test_vela_reduce_min_reshaped_across_axes_reuses_one_row",
)
CLAMP_COPIES = _row(
    "clamp_copies",
    Kind.WORKAROUND,
    (U85,),
    "Vela 5.2.0 drops an identity RESCALE of int16 values, so a 16-bit copy is a full-range CLAMP, which it keeps "
    "(at int8 it keeps the RESCALE as its own pass).",
    "tests/simulator/test_npu_u85_zoo.py::test_16_bit_activations_bit_exact_u85_256",
)
SELECT_OPERAND_COPIES = _row(
    "select_operand_copies",
    Kind.WORKAROUND,
    (U85,),
    "Vela 5.2.0 reads a SELECT's operand that a RESHAPE into another shape also reads in that RESHAPE's shape "
    "(its AND of x [2, 5, 7] reshaped to [5, 14] for an amax reads x's rows 14 apart), so the lowering gives one "
    "of the two readers a copy (Lowerer.apart).",
    "tests/simulator/test_npu_select_readers.py::test_kilns_select_beside_a_reshape_of_its_operand_runs_right",
)
BOOL_OUTPUT_COPIES = _row(
    "bool_output_copies",
    Kind.WORKAROUND,
    (U85,),
    "Vela 5.2.0 turns a bool graph output into TOSA's 0 and 1 in place (an AND with 1), under the graph's other "
    "readers of it, which take the NPU's -1 for true (a SELECT then ANDs with 1, an any takes a minimum), so a bool "
    "output that other ops read is written as a copy of its own (Lowerer.lower).",
    "tests/simulator/test_npu_select_readers.py::test_kilns_bool_output_that_other_ops_read_runs_right",
)

# ---- equivalent graphs Vela 5.2.0 estimates faster on some families -------------------------------
CHANNELS_LAST_PAD_COPIES = _row(
    "channels_last_pad_copies",
    Kind.FASTER,
    (U65, U85),
    "A reflect, replicate or circular pad of a rank-4 value made channels last first: CONCATs along PyTorch's "
    "last axis (the channels to Vela) cost more there than the layout changes.",
    "tests/compiler/test_lowering.py::test_every_pad_mode_equals_eager_pytorch",
    measured=True,
)

# ---- lowering choices: kiln.compile.fastest compiles both forms, the first guess first ---------
POOLED_MEANS = _row(
    "pooled_means",
    Kind.CHOICE,
    (U85,),
    "A global mean read in place by a pool or a depthwise sum rather than summed by REDUCE_SUM: on Ethos-U85 "
    "Vela 5.2.0 transposes a REDUCE_SUM's input first; elsewhere Vela's schedule around either form decides.",
    "tests/compiler/test_lowering_choices.py::test_the_program_holds_the_graph_vela_estimates_fastest",
    measured=True,
)
FUSED_EXPS = _row(
    "fused_exps",
    Kind.CHOICE,
    (U85,),
    "Softmax's three exp TABLEs each read their own x - max (a SUB Vela fuses the TABLE into) rather than one "
    "shared: fewer NPU cycles there; on Ethos-U55 and U65 the shared one was faster for kwt's attention (a "
    "softmax over [1, 4, 64, 64] alone is faster the other way there too, so each partition keeps Vela's faster).",
    "tests/simulator/test_npu_softmax.py::test_softmax_on_the_npu_model_equals_tosa_reference",
    measured=True,
)
RANK4_TRANSPOSES = _row(
    "rank4_transposes",
    Kind.CHOICE,
    (U65, U85),
    "A layout change as the rank-4 TRANSPOSE Vela 5.2.0 decomposes itself rather than one 2-D TRANSPOSE of the "
    "swapped groups: faster there (on Ethos-U85 the 2-D one waits on memory), though unit axes can reverse it.",
    "tests/simulator/test_npu_zoo.py::test_every_lowering_choice_bit_exact",
    measured=True,
)
VELA_STRIDED_POOLS = _row(
    "vela_strided_pools",
    Kind.CHOICE,
    (U55, U85),
    "An average pool with a stride beyond 3 as one AVG_POOL2D that Vela 5.2.0 decomposes itself rather than "
    "kiln's window sums: faster there, slower on Ethos-U65 (max pools stay kiln's everywhere).",
    "tests/simulator/test_npu_strided.py::test_strided_average_pool_either_way_equals_tosa_reference",
    measured=True,
)
FLAT_STRIDED_SLICES = _row(
    "flat_strided_slices",
    Kind.CHOICE,
    (),
    "A strided slice's rows grouped as [1, 1, before * n, step * after] rather than [1, before, n, step * after]: "
    "no family's first guess, as Vela 5.2.0 estimates it faster only on the smallest configurations.",
    "tests/simulator/test_npu_strided_slice.py::test_strided_slice_on_the_npu_model_equals_tosa_reference",
    measured=True,
)


@dataclass(frozen=True)
class NpuFamily:
    """One NPU family as the compiler sees it: the rows of ROWS that apply to it."""

    name: str  # "ethos-u55", the target names' prefix
    rows: frozenset[str]  # the names of the rows that apply

    def has(self, row: Row) -> bool:
        """Whether `row` applies to this family (a choice: whether its first guess takes it)."""
        return row.name in self.rows

    def takes(self, choice: Row, flipped: frozenset[str]) -> bool:
        """Whether a graph takes `choice`: this family's first guess, unless `flipped` names it."""
        return self.has(choice) != (choice.name in flipped)


FAMILIES = {name: NpuFamily(name, frozenset(r.name for r in ROWS if name in r.families)) for name in NAMES}
CHOICES = tuple(r.name for r in ROWS if r.kind is Kind.CHOICE)  # as a report's flipped_choices names them
