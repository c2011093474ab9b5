"""kiln's Ethos-U quantizer, on torchao's PT2E API.

The scheme is the one TOSA's INT profile and the Ethos-U run natively:
- activations: int8, asymmetric, per tensor (int16 symmetric as an option, for the whole
  model or for the ops kiln.frontend.precision chooses);
- weights: int8, symmetric (zero point 0, range -127..127), per output channel; a table that a
  linear's weight and a gather both read (an embedding tied to the head) at one scale for the
  whole table, so both read the same integers, which the program then holds once;
- bias: int32, zero point 0, scale = input scale x weight scale per channel.

Each operator falls in one class (its row of kiln.vocabulary), which decides how it is annotated:
- MAC ops (conv, linear, ...) quantize their weights and bias; a following
  relu/relu6/hardtanh/clamp is fused: only the activation's output is observed,
  as the NPU clamps in the same operation.
- ops with their own output range (add, sigmoid, softmax, ...): every input and
  the output observed independently.
- ops that move or select values without arithmetic (reshape, max pool, pad,
  slice, flip, expand, ...), and average pooling (TOSA's AVG_POOL2D keeps the
  scale): the output shares the input's quantization parameters, so no rescale
  is needed; cat, minimum, maximum, where's two values and index_copy's tensor and source: every
  input and the output share one range.
Integer and bool tensors (indices, masks) are never observed, and an op whose
output is not a float tensor is not annotated. Anything else is left in float;
the partitioner then keeps it on the CPU and the report says why.

The graph it annotates is the normalised one (kiln.frontend.normalize), which
transform_for_annotation produces, so the PT2E reference is the rewritten graph.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.observer import HistogramObserver, MinMaxObserver, PerChannelMinMaxObserver
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
from torchao.quantization.pt2e.quantizer import (
    DerivedQuantizationSpec,
    FixedQParamsQuantizationSpec,
    QuantizationAnnotation,
    QuantizationSpec,
    Quantizer,
    SharedQuantizationSpec,
)

from kiln.frontend import histogram, normalize, precision
from kiln.frontend.attention import MASKED_BELOW
from kiln.spec import Int16Regions, QuantizationScheme
from kiln.vocabulary import FUSIBLE_ACTIVATIONS, FUSING_PRODUCERS, GATHERS, WEIGHT_AXIS, Quantized, annotated

aten = torch.ops.aten

# How each op is annotated: kiln.vocabulary's quantized column.
WEIGHTED_OPS = annotated(Quantized.MAC)  # int8 weights per channel along vocabulary.WEIGHT_AXIS, a bias
INDEPENDENT_OPS = annotated(Quantized.INDEPENDENT, Quantized.OWN_RANGE)
PROBABILITY_OPS = annotated(Quantized.PROBABILITY)
ONE_RANGE_OPS = annotated(Quantized.ONE_RANGE)
SHARED_OPS = annotated(Quantized.SHARED)
OBSERVED_READERS = annotated(Quantized.COMPARISON, Quantized.INDEX)  # float operands observed, result never


class MaskAwareHistogramObserver(HistogramObserver):
    """A HistogramObserver that does not observe mask fills (values <= MASKED_BELOW) as values.

    A tensor holding fills (attention scores with masked positions, which a softmax along the
    last dim reads) is observed as its other values, and its range reaches `margin` below the
    least of them, margin = ln(2 * levels * n) for n = the last dim's size and `levels` the
    integer type's: a masked position quantizes to the lowest level, and the softmax gives the
    n of them together less than half an output step (exp(-margin) * n = 1 / (2 * levels))."""

    def forward(self, x_orig: torch.Tensor) -> torch.Tensor:
        if x_orig.numel() == 0 or not x_orig.is_floating_point():
            return super().forward(x_orig)
        x = x_orig.detach()
        masked = x <= MASKED_BELOW
        if not bool(masked.any()):
            return super().forward(x_orig)
        kept = x[~masked]
        if kept.numel():
            super().forward(kept)
            levels = self.quant_max - self.quant_min + 1
            low = float(kept.min()) - math.log(2 * levels * x.shape[-1])
            self.masked_low = min(getattr(self, "masked_low", low), low)
        return x_orig

    def _non_linear_param_search(self) -> tuple[torch.Tensor, torch.Tensor]:
        """torchao's range search, its answer found faster (kiln.frontend.histogram)."""
        assert self.histogram.size()[0] == self.bins, "bins mismatch"
        bin_width = (self.max_val - self.min_val) / self.bins
        total = torch.sum(self.histogram).item()
        cumulative = torch.cumsum(self.histogram, dim=0).tolist()
        start, end = histogram.search(cumulative, total, self._compute_quantization_error)
        return self.min_val + bin_width * start, self.min_val + bin_width * (end + 1)

    def _calculate_qparams(self, min_val: torch.Tensor, max_val: torch.Tensor):
        if hasattr(self, "masked_low"):
            min_val = torch.minimum(min_val, torch.tensor(self.masked_low, dtype=min_val.dtype))
        return super()._calculate_qparams(min_val, max_val)


# The least scale of a quantized tensor (its observer's eps). Every change of scale on the NPU is
# a TOSA RESCALE by multiplier * 2**-shift, a 31-bit multiplier in [2**30, 2**31) and shift 2..62
# (Vela's OFM_SCALE register holds shift 0..63; its quantise_scale): the factors it carries at full
# precision lie in [2**-32, 2**29). A requantization into a tensor at the floor is a factor
# s / SCALE_FLOOR, below 2**29 for every scale s < 2**13 (an int8 range up to 2**21) at 2**-16. A
# MAC's factor s_in * s_w / s_out with both at the floor, 2**-32 / s_out, falls below 2**-32 only
# where s_out > 1, and there every int32 accumulator times it rounds to 0, as the float result does
# at that output scale. So the rescale represents every factor a scale of 2**-16 makes (ExecuTorch's
# floor too), and an int8 tensor keeps its full resolution down to a range of 255 * 2**-16 ~ 0.0039
# (2**-12 stopped at ~0.062).
SCALE_FLOOR = 2**-16
# 16-bit activations keep the floor of 2**-12 for now: at the finer scale 2**-16 allows, TOSA's
# interpolated 16-bit TABLE strays up to 6 steps from PT2E's sigmoid (tests/compiler/test_lowering.py's
# int16 sigmoid case), so kiln's rule table_within_a_step would move 16-bit tables to the CPU.
INT16_SCALE_FLOOR = 2**-12


def activation_spec(scheme: QuantizationScheme) -> QuantizationSpec:
    """Activations as `scheme` says: per tensor, int8 asymmetric or int16 symmetric."""
    dtype, quant_min, quant_max, symmetric = scheme.ACTIVATIONS[scheme.activation_bits]
    return QuantizationSpec(
        dtype=getattr(torch, dtype),
        quant_min=quant_min,
        quant_max=quant_max,
        qscheme=torch.per_tensor_symmetric if symmetric else torch.per_tensor_affine,
        observer_or_fake_quant_ctr=MaskAwareHistogramObserver.with_args(
            eps=INT16_SCALE_FLOOR if scheme.activation_bits == 16 else SCALE_FLOOR
        ),
    )


def probability_spec(scheme: QuantizationScheme) -> FixedQParamsQuantizationSpec:
    """A softmax's output: [0, 1) in the activation type, zero at its lowest value (int8) or
    at 0 (int16, symmetric)."""
    dtype, quant_min, quant_max, symmetric = scheme.ACTIVATIONS[scheme.activation_bits]
    bits = 16 if symmetric else 8
    return FixedQParamsQuantizationSpec(
        dtype=getattr(torch, dtype),
        scale=2.0 ** -(bits - 1 if symmetric else bits),
        zero_point=0 if symmetric else quant_min,
        quant_min=quant_min,
        quant_max=quant_max,
        qscheme=torch.per_tensor_affine,
    )


def fixed_range_spec(scheme: QuantizationScheme, low: float, high: float) -> FixedQParamsQuantizationSpec:
    """A tensor whose range is known beforehand (a program's state, kiln.frontend.state): the
    qparams of a symmetric observer of the scheme's type over [low, high], so that the integer 0
    is 0.0 (a program's state starts as zeroed memory)."""
    dtype, quant_min, quant_max, _ = scheme.ACTIVATIONS[scheme.activation_bits]
    observer = PerChannelMinMaxObserver(
        ch_axis=0,
        dtype=getattr(torch, dtype),
        qscheme=torch.per_channel_symmetric,
        quant_min=quant_min,
        quant_max=quant_max,
        eps=INT16_SCALE_FLOOR if scheme.activation_bits == 16 else SCALE_FLOOR,
    )
    observer(torch.tensor([[low, high]]))
    scale, zero_point = observer.calculate_qparams()
    return FixedQParamsQuantizationSpec(
        dtype=getattr(torch, dtype),
        scale=float(scale[0]),
        zero_point=int(zero_point[0]),
        quant_min=quant_min,
        quant_max=quant_max,
        qscheme=torch.per_tensor_affine,
    )


def weight_spec(axis: int) -> QuantizationSpec:
    """Weights: int8, symmetric (-127..127), per output channel along `axis`."""
    return QuantizationSpec(
        dtype=torch.int8,
        quant_min=-127,
        quant_max=127,
        qscheme=torch.per_channel_symmetric,
        ch_axis=axis,
        observer_or_fake_quant_ctr=PerChannelMinMaxObserver.with_args(eps=SCALE_FLOOR),
    )


def tied_weight_spec() -> QuantizationSpec:
    """A weight that a MAC op and a gather both read (a tied embedding and head): int8, symmetric
    (-127..127), one scale for the whole table, so that both read the same integers (one table in
    the program; kiln.lower.conv's tied head)."""
    return QuantizationSpec(
        dtype=torch.int8,
        quant_min=-127,
        quant_max=127,
        qscheme=torch.per_tensor_symmetric,
        observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=SCALE_FLOOR),
    )


def tied_tables(model: GraphModule, skip=lambda node: False) -> dict[Node, Node]:
    """Each constant (get_attr) that a linear without a bias reads as its weight and a gather reads
    as its table (neither left in float by `skip`), mapped to the first of those readers in the
    graph's order: its reading is observed (tied_weight_spec), the others share it (PT2E shares
    only an edge observed before)."""
    order = {node: i for i, node in enumerate(model.graph.nodes)}
    tied = {}
    for node in model.graph.nodes:
        if node.op != "get_attr":
            continue
        readers = [u for u in node.users if u.op == "call_function" and not skip(u)]
        linears = [u for u in readers if u.target is aten.linear.default and u.args[1] is node and _no_bias(u)]
        gathers = [u for u in readers if u.target in GATHERS and u.args[0] is node]
        if linears and gathers:
            tied[node] = min(linears + gathers, key=order.__getitem__)
    return tied


def _no_bias(linear: Node) -> bool:
    return (linear.args[2] if len(linear.args) > 2 else linear.kwargs.get("bias")) is None


def _tied_spec(table: Node, reader: Node, tied: dict[Node, Node]):
    """How `reader` reads the tied table `table`: observed if it is the first reader, else as that one."""
    return tied_weight_spec() if tied[table] is reader else SharedQuantizationSpec((table, tied[table]))


def bias_spec(activation: Node, weight: Node, mac: Node) -> DerivedQuantizationSpec:
    """Bias: int32, zero point 0, scale = activation scale x weight scale per channel."""

    def derive(observers):
        activation_scale, _ = observers[0].calculate_qparams()
        weight_scale, _ = observers[1].calculate_qparams()
        scale = (activation_scale * weight_scale).to(torch.float32)
        return scale, torch.zeros_like(scale, dtype=torch.int32)

    return DerivedQuantizationSpec(
        derived_from=[(activation, mac), (weight, mac)],
        derive_qparams_fn=derive,
        dtype=torch.int32,
        quant_min=-(2**31),
        quant_max=2**31 - 1,
        qscheme=torch.per_channel_symmetric,
        ch_axis=0,
    )


class EthosUQuantizer(Quantizer):
    """Annotates a graph from torch.export for int8 (or int16) Ethos-U execution.

    `skip(node) -> bool` leaves chosen nodes in float (they then run on the CPU). `int16` chooses
    ops of an 8-bit scheme that compute at 16 bits (kiln.frontend.precision); after annotate,
    `int16_reasons` maps each chosen node's name to the policy or pattern that chose it. `fixed`
    maps inputs (placeholder names) to the (least, greatest) value they hold: each is read at the
    qparams of that range (fixed_range_spec) by every op reading it, not at an observed range;
    `fixed_outputs` likewise maps outputs (positions among the graph's outputs) to the range the
    op returning them writes them in (a program's state: kiln.frontend.state). `int16_ops` names
    more ops that compute at 16 bits, each with its reason (kiln.frontend.autoprecision's choice).
    `tie`: a table that a linear and a gather both read is quantized once for both (tied_tables);
    else the linear's copy per channel and the gather's as an activation, as any others.
    """

    def __init__(
        self,
        scheme: QuantizationScheme = QuantizationScheme(),
        skip=None,
        int16: Int16Regions | None = None,
        fixed: dict[str, tuple[float, float]] | None = None,
        fixed_outputs: dict[int, tuple[float, float]] | None = None,
        int16_ops: dict[str, str] | None = None,
        tie: bool = True,
    ):
        super().__init__()
        self.scheme = scheme
        self.skip = skip or (lambda node: False)
        self.int16 = int16 or Int16Regions()
        self.int16_reasons: dict[str, str] = {}
        self.fixed = fixed or {}
        self.fixed_outputs = fixed_outputs or {}
        self.int16_ops = int16_ops or {}
        self.tie = tie
        self.tied: dict[Node, Node] = {}  # tied_tables of the graph being annotated (none unless `tie`)

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        return normalize.normalize(model)

    def annotate(self, model: GraphModule) -> GraphModule:
        chosen = precision.sixteen_bit(model, self.int16) if self.int16 else {}
        for node in model.graph.nodes:
            if node.name in self.int16_ops and node not in chosen:
                chosen[node] = self.int16_ops[node.name]
        self.int16_reasons = {node.name: why for node, why in chosen.items()}
        wide = QuantizationScheme(16)
        self.tied = tied_tables(model, self.skip) if self.tie else {}
        for node in model.graph.nodes:
            if node.op != "call_function" or _annotated(node) or self.skip(node):
                continue
            scheme = wide if node in chosen else self.scheme
            act = activation_spec(scheme)
            if node.target in OBSERVED_READERS:
                _mark(
                    node,
                    {a: _input_spec(a, act) for a in node.args if isinstance(a, Node) and _is_float_tensor(a)},
                    None,
                )
            if not _is_float_tensor(node):
                continue
            if node.target in WEIGHTED_OPS:
                self._annotate_mac(node, act)
            elif node.target in INDEPENDENT_OPS:
                self._annotate_independent(node, act)
            elif node.target in PROBABILITY_OPS:
                _mark(node, {node.args[0]: act}, probability_spec(scheme))
            elif node.target in ONE_RANGE_OPS:
                self._annotate_one_range(node, act)
            elif node.target in SHARED_OPS:
                self._annotate_shared(node, act)
        self._fix_ranges(model, chosen, wide)
        return model

    def _fix_ranges(self, model: GraphModule, chosen, wide: QuantizationScheme):
        """Every read of a `fixed` input at its range's qparams (in its first reader's width), and
        every `fixed_outputs` output written at its range's (in its writer's width)."""
        returned = model.graph.output_node().args[0]
        for k, (low, high) in self.fixed_outputs.items():
            writer = returned[k]
            if isinstance(writer, Node) and _annotated(writer) and writer.meta["quantization_annotation"].output_qspec:
                scheme = wide if writer in chosen else self.scheme
                writer.meta["quantization_annotation"].output_qspec = fixed_range_spec(scheme, low, high)
        for node in model.graph.nodes:
            if node.op != "placeholder" or node.name not in self.fixed:
                continue
            readers = [
                u for u in node.users if _annotated(u) and node in u.meta["quantization_annotation"].input_qspec_map
            ]
            if readers:
                scheme = wide if readers[0] in chosen else self.scheme
                spec = fixed_range_spec(scheme, *self.fixed[node.name])
                for reader in readers:
                    reader.meta["quantization_annotation"].input_qspec_map[node] = spec

    def validate(self, model: GraphModule) -> None:
        pass

    def _annotate_mac(self, node: Node, act: QuantizationSpec):
        activation, weight = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else None
        tied = weight in self.tied and _no_bias(node) and node.target is aten.linear.default
        spec = _tied_spec(weight, node, self.tied) if tied else weight_spec(WEIGHT_AXIS[node.target])
        inputs = {activation: _input_spec(activation, act), weight: spec}
        if isinstance(bias, Node):
            inputs[bias] = bias_spec(activation, weight, node)
        self._mark_fusing(node, inputs, act)

    def _annotate_independent(self, node: Node, act: QuantizationSpec):
        inputs = {arg: _input_spec(arg, act) for arg in node.args if isinstance(arg, Node) and _is_float_tensor(arg)}
        self._mark_fusing(node, inputs, act)

    def _mark_fusing(self, node: Node, inputs: dict, act: QuantizationSpec):
        """Marks `node`; a fusible activation after it takes the output observer instead."""
        fused = _fusible_activation(node) if node.target in FUSING_PRODUCERS else None
        if fused is not None and not self.skip(fused):
            _mark(node, inputs, None)
            _mark(fused, {}, act)
        else:
            _mark(node, inputs, act)

    def _annotate_shared(self, node: Node, act: QuantizationSpec):
        source = node.args[0]
        if not isinstance(source, Node) or not _is_float_tensor(source):
            return
        tied = source in self.tied and node.target in GATHERS and node.args[0] is source
        spec = _tied_spec(source, node, self.tied) if tied else _input_spec(source, act)
        _mark(node, {source: spec}, SharedQuantizationSpec((source, node)))

    def _annotate_one_range(self, node: Node, act: QuantizationSpec):
        """cat, where, minimum, maximum, index_copy: every float tensor operand (cat's list, where's
        two values, index_copy's tensor and source) and the output share the first one's range."""
        tensors = [t for t in _flattened(node.args) if isinstance(t, Node) and _is_float_tensor(t)]
        if not tensors:
            return
        first = tensors[0]
        shared = SharedQuantizationSpec((first, node))
        # a tensor concatenated with itself is observed once (sharing with itself is a cycle)
        inputs = {first: _input_spec(first, act), **{t: shared for t in tensors[1:] if t is not first}}
        _mark(node, inputs, shared)


def _flattened(args) -> list:
    return [a for arg in args for a in (arg if isinstance(arg, (list, tuple)) else (arg,))]


def _is_float_tensor(node: Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _fusible_activation(node: Node) -> Node | None:
    """The relu/relu6/hardtanh/clamp that alone consumes `node`, if its range starts at or below 0."""
    users = list(node.users)
    if len(users) != 1 or users[0].op != "call_function" or users[0].target not in FUSIBLE_ACTIVATIONS:
        return None
    activation = users[0]
    if activation.target in (aten.clamp.default,):
        low = activation.args[1] if len(activation.args) > 1 else activation.kwargs.get("min")
        if low is None or low > 0:
            return None  # a clamp that cuts off above zero changes the output range asymmetrically
    return activation


def _input_spec(arg: Node, act: QuantizationSpec):
    """How an op reads `arg`: in the fixed range of a softmax's output of its own width, read
    directly or through ops that share their input's range (a reshape of attention weights; so no
    requantization separates the two), else observed as `act`."""
    source = arg
    while source.op == "call_function" and source.target in SHARED_OPS and isinstance(source.args[0], Node):
        source = source.args[0]
    if source.op != "call_function" or source.target not in PROBABILITY_OPS:
        return act
    annotation = source.meta.get("quantization_annotation")
    output = annotation.output_qspec if annotation is not None else None
    return SharedQuantizationSpec(arg) if output is None or output.dtype == act.dtype else act


def _annotated(node: Node) -> bool:
    annotation = node.meta.get("quantization_annotation")
    return annotation is not None and annotation._annotated


def _mark(node: Node, inputs: dict, output):
    node.meta["quantization_annotation"] = QuantizationAnnotation(
        input_qspec_map=inputs, output_qspec=output, _annotated=True
    )


def calibrate(module: GraphModule, calibration: Iterable[tuple], quantizer: EthosUQuantizer) -> GraphModule:
    """PT2E's prepared module (annotated, observers inserted) after observing `calibration` inputs;
    convert_pt2e makes it the quantized module."""
    prepared = prepare_pt2e(module, quantizer)
    with torch.no_grad():
        for inputs in calibration:
            prepared(*inputs)
    return prepared


def quantize(module: GraphModule, calibration: Iterable[tuple], quantizer: EthosUQuantizer) -> GraphModule:
    """PT2E post-training quantization: annotate, observe `calibration` inputs, convert.

    `module` is ExportedProgram.module(check_guards=False) (the guards node that
    torch 2.13 adds otherwise breaks prepare_pt2e). The result holds
    quantize/dequantize pairs around float ops: PT2E's reference semantics.
    """
    return convert_pt2e(calibrate(module, calibration, quantizer))
