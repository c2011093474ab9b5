"""kiln.vocabulary, the one table of kiln's operators: the lowering and the CPU kernels cover
exactly the rows that name their modules (each checks so when imported), and the sets the
stages use are views of the rows."""

from __future__ import annotations

import pytest
import torch

from kiln import vocabulary
from kiln.errors import InternalError
from kiln.lower import tosa
from kiln.program import kernels

aten = torch.ops.aten


def test_every_op_has_one_row():
    every = [op for row in vocabulary.OPERATORS for op in row.overloads]
    assert len(every) == len(set(every))


def test_every_module_a_row_names_exists():
    lowering = {row.lowering for row in vocabulary.OPERATORS} - {None}
    assert {f"kiln.lower.{name}" for name in lowering} == {fn.__module__ for fn in tosa.LOWERINGS.values()}
    kernel = {row.kernel for row in vocabulary.OPERATORS} - {None}
    assert kernel == {family.__name__.rpartition(".")[2] for family in kernels.FAMILIES}


def test_the_lowering_refuses_to_differ_from_the_vocabulary():
    """Importing kiln.lower.tosa runs check_vocabulary on its lowerings (the import passing
    shows they agree); a lowering more or fewer, or one in another module than its row names,
    is refused."""
    lowerings = dict(tosa.LOWERINGS)
    tosa.check_vocabulary(lowerings)
    from kiln.lower import pool

    for doctored, said in [
        (
            {**lowerings, aten.div.Tensor: lowerings[aten.mul.Tensor]},
            "a lowering for ['aten.div.Tensor'], not in its row",
        ),
        (
            {k: v for k, v in lowerings.items() if k is not aten.conv2d.default},
            "no lowering for ['aten.conv2d.default'], in its row",
        ),
        (
            {**lowerings, aten.conv2d.default: pool._avg_pool},
            "['aten.conv2d.default'] lowered outside kiln.lower.conv, which its row names",
        ),
    ]:
        with pytest.raises(InternalError, match="kiln.lower and kiln.vocabulary disagree") as raised:
            tosa.check_vocabulary(doctored)
        assert str(raised.value).endswith(said), str(raised.value)


class _Family:
    def __init__(self, name: str, ops):
        self.__name__ = f"kiln.program.kernels.{name}"
        self.KERNELS = dict.fromkeys(ops)


def test_the_cpu_kernels_refuse_to_differ_from_the_vocabulary():
    kernels.check_vocabulary(kernels.FAMILIES)
    sort = vocabulary.kernels_in("sort")
    for doctored, said in [
        (
            _Family("sort", sort | {aten.cumsum.default}),
            "sort has kernels for ['aten.cumsum.default'], whose rows name no such kernel",
        ),
        (
            _Family("sort", sort - {aten.topk.default}),
            "sort has no kernel for ['aten.topk.default'], whose rows name it",
        ),
    ]:
        with pytest.raises(InternalError, match="kiln.program.kernels and kiln.vocabulary disagree") as raised:
            kernels.check_vocabulary([doctored])
        assert str(raised.value).endswith(said), str(raised.value)


def test_the_quantizer_annotates_each_op_one_way():
    """Each annotated op is in exactly one of the quantizer's classes, as its row says."""
    from kiln.frontend import quantizer

    classes = [
        quantizer.WEIGHTED_OPS,
        quantizer.INDEPENDENT_OPS,
        quantizer.PROBABILITY_OPS,
        quantizer.ONE_RANGE_OPS,
        quantizer.SHARED_OPS,
        quantizer.OBSERVED_READERS,
    ]
    every = [op for c in classes for op in c]
    assert len(every) == len(set(every)) == len(vocabulary.annotation_table())
    assert all(op in vocabulary.WEIGHT_AXIS for op in quantizer.WEIGHTED_OPS)
    assert vocabulary.SOFTMAX_OPS == quantizer.PROBABILITY_OPS


def test_a_gathers_index_argument_is_its_schemas():
    """embedding(weight, indices, ...), index_select(self, dim, index) and index_copy(self, dim, index,
    source), as PyTorch names them."""
    assert vocabulary.index_argument(aten.embedding.default) == 1
    assert vocabulary.index_argument(aten.index_select.default) == 2
    assert vocabulary.index_argument(aten.index_copy.default) == 2
    assert vocabulary.INDEXED == {aten.embedding.default, aten.index_select.default, aten.index_copy.default}
