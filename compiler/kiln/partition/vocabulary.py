"""The ops kiln's TOSA lowering covers, named once, in the partition stage.

The support rules (kiln.partition.support) decide what may go to the NPU from these sets;
the lowering (kiln.lower.tosa), a later stage, registers a lowering for exactly LOWERED
and an 8-bit table for exactly TABLE_OPS, and checks that it does when it is imported
(kiln.lower.tosa.check_vocabulary). So the partitioner never needs the lowering, and the
two cannot drift apart.
"""

from __future__ import annotations

import torch

from kiln.frontend.quantizer import BOOL_REDUCTIONS, COMPARISON_OPS, INDEX_OPS, LOGICAL_OPS

aten = torch.ops.aten

# Unary functions an int8 TABLE computes: 256 entries, quantize(f(dequantize(q))) each.
TABLE_OPS = frozenset({
    aten.sigmoid.default, aten.tanh.default, aten.hardswish.default, aten.hardsigmoid.default,
    aten.leaky_relu.default, aten.exp.default, aten.log.default, aten.reciprocal.default,
    aten.gelu.default, aten.silu.default, aten.elu.default, aten.selu.default, aten.celu.default,
    aten.softplus.default, aten.mish.default, aten.sqrt.default, aten.rsqrt.default, aten.sin.default,
    aten.cos.default, aten.erf.default, aten.abs.default, aten.neg.default, aten.floor.default, aten.ceil.default,
    aten.round.default, aten.trunc.default, aten.sign.default, aten.pow.Tensor_Scalar,
})

LOWERED = frozenset({
    # MAC ops
    aten.conv2d.default, aten.linear.default, aten.conv_transpose2d.input,
    aten.matmul.default, aten.bmm.default, aten.mm.default,
    # pooling and means
    aten.avg_pool2d.default, aten.max_pool2d.default, aten.adaptive_avg_pool2d.default, aten.mean.dim,
    # elementwise
    aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor,
    aten.relu.default, aten.relu6.default, aten.hardtanh.default, aten.clamp.default,
    aten.minimum.default, aten.maximum.default,
    *TABLE_OPS,
    # reductions over any dims (mean.dim is with the means above)
    aten.amax.default, aten.amin.default, aten.sum.dim_IntList,
    # softmax along one dim
    aten.softmax.int, aten._softmax.default, aten.log_softmax.int, aten._log_softmax.default,
    # data movement
    aten.view.default, aten.reshape.default, aten.flatten.using_ints, aten.squeeze.dim, aten.squeeze.dims,
    aten.squeeze.default, aten.unsqueeze.default, aten.clone.default, aten.alias.default,
    aten.permute.default, aten.transpose.int, aten.cat.default, aten.constant_pad_nd.default, aten.pad.default,
    aten.slice.Tensor, aten.select.int, aten.expand.default,
    # comparisons of int8 values (bool results), logical ops and any/all of bools, and select (Ethos-U85:
    # support.py)
    *COMPARISON_OPS, aten.where.self, *LOGICAL_OPS,
    # indices of quantized values (int32 on the NPU, then int64 by a cast on the CPU)
    *INDEX_OPS,
    # gathers of quantized values by indices checked and narrowed to int32 on the CPU (Ethos-U85)
    aten.embedding.default, aten.index_select.default,
    # resizing
    aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default,
    aten.upsample_bilinear2d.vec, aten.upsample_bilinear2d.default,
})
