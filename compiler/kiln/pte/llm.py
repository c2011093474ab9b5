"""ExecuTorch's conventions for a language model's program, as its LLM export writes them and its
LLM runner reads them: the generation methods' names and the constant methods (a plan with no
inputs returning one Int) that describe the model. kiln's generation (kiln.reference.generate) and
the generation app's build (kiln.firmware.generate_plan) both read them from here."""

from __future__ import annotations

from kiln.pte.reader import PteFile
from kiln.pte.schema import Int

PREFILL, DECODE = "prefill", "decode"
MAX_SEQ_LEN = "get_max_seq_len"  # the positions the key/value cache holds


def constant_method(f: PteFile, name: str) -> int | None:
    """The int a constant method (a plan with no inputs returning one Int) returns, or None."""
    for plan in f.program.execution_plans:
        if plan.name == name and not plan.inputs and len(plan.outputs) == 1:
            value = plan.values[plan.outputs[0]]
            if isinstance(value, Int):
                return value.value
    return None
