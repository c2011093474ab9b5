"""kiln's Ethos-U quantizer: the int8 scheme's invariants, checked on small models
whose expected properties follow from the definition of the scheme, and the PT2E
reference against PyTorch eager."""

import pytest
import torch
import torch.nn as nn

from kiln import graph
from kiln.errors import UsageError
from kiln.frontend.quantizer import EthosUQuantizer, QuantizationScheme, quantize

qd = torch.ops.quantized_decomposed
aten = torch.ops.aten


class ConvReluPoolLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.linear = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        y = nn.functional.max_pool2d(y, 2)
        y = torch.cat([y, torch.sigmoid(y)], 1)[:, :4]
        return self.linear(torch.flatten(y, 1))


def quantized(model, x, **kwargs):
    module = torch.export.export(model.eval(), (x,), strict=False).module(check_guards=False)
    return quantize(module, [(x,)], EthosUQuantizer(**kwargs))


def node(graph_module, target):
    return next(n for n in graph_module.graph.nodes if n.target == target)


def output_qparams(n):
    """(scale, zero point) of the quantize node that consumes `n`, or None."""
    q = [u for u in n.users if u.target == qd.quantize_per_tensor.default]
    return (q[0].args[1], q[0].args[2]) if q else None


def input_qparams(n, index=0):
    dq = n.args[index]
    assert dq.target == qd.dequantize_per_tensor.default, f"{n.name} input {index} is not dequantized"
    return dq.args[1], dq.args[2]


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    model, x = ConvReluPoolLinear().eval(), torch.randn(1, 2, 8, 8)
    return model, x, quantized(model, x)


def test_weights_are_int8_symmetric_per_channel(small):
    _, _, q = small
    for mac in (node(q, aten.conv2d.default), node(q, aten.linear.default)):
        dq_weight = mac.args[1]
        assert dq_weight.target == qd.dequantize_per_channel.default
        weights = getattr(q, dq_weight.args[0].target)
        zero_points = getattr(q, dq_weight.args[2].target)
        assert weights.dtype == torch.int8 and weights.abs().max() <= 127
        assert torch.count_nonzero(zero_points) == 0 and dq_weight.args[3] == 0  # axis 0: output channels
        # Symmetric per channel: each channel's largest magnitude maps to 127.
        assert torch.all(weights.flatten(1).abs().amax(1) == 127)


def test_bias_scale_is_input_scale_times_weight_scale(small):
    _, _, q = small
    conv = node(q, aten.conv2d.default)
    input_scale, _ = input_qparams(conv)
    weight_scales = getattr(q, conv.args[1].args[1].target)
    dq_bias = conv.args[2]
    bias_scales = getattr(q, dq_bias.args[1].target)
    assert getattr(q, dq_bias.args[0].target).dtype == torch.int32
    torch.testing.assert_close(bias_scales, input_scale * weight_scales, rtol=1e-6, atol=0)


def test_relu_is_fused_into_the_conv(small):
    _, _, q = small
    conv = node(q, aten.conv2d.default)
    relu = node(q, aten.relu.default)
    assert relu.args[0] is conv and output_qparams(conv) is None  # no rescale between them
    # A non-negative range quantized asymmetrically puts 0.0 at the lowest code.
    assert output_qparams(relu)[1] == -128


def test_data_movement_keeps_quantization_parameters(small):
    _, _, q = small
    for target in (
        aten.max_pool2d.default,
        aten.slice.Tensor,
        aten.reshape.default,
    ):  # flatten is normalised to reshape
        n = node(q, target)
        assert output_qparams(n) == input_qparams(n), target
    cat = node(q, aten.cat.default)
    params = {(dq.args[1], dq.args[2]) for dq in cat.args[0]}
    assert params == {output_qparams(cat)}


def test_pt2e_reference_is_within_a_few_steps_of_eager(small):
    model, x, q = small
    scale, _ = output_qparams(node(q, aten.linear.default))
    with torch.no_grad():
        error = (q(x) - model(x)).abs().max().item()
    assert error <= 4 * scale


def test_skipped_node_stays_float():
    torch.manual_seed(0)
    model, x = ConvReluPoolLinear().eval(), torch.randn(1, 2, 8, 8)
    q = quantized(model, x, skip=lambda n: n.target == aten.linear.default)
    linear = node(q, aten.linear.default)
    weight = linear.args[1]
    assert weight.op == "get_attr" and q.get_parameter(weight.target).dtype == torch.float32
    assert output_qparams(linear) is None


def test_int16_activations_are_symmetric():
    torch.manual_seed(0)
    model, x = ConvReluPoolLinear().eval(), torch.randn(1, 2, 8, 8)
    q = quantized(model, x, scheme=QuantizationScheme(activation_bits=16))
    quantizes = [n for n in q.graph.nodes if n.target == qd.quantize_per_tensor.default]
    assert quantizes and all(n.args[5] == torch.int16 and n.args[2] == 0 for n in quantizes)


def test_unknown_precision_is_a_usage_error():
    with pytest.raises(UsageError, match="8 or 16 bits"):
        QuantizationScheme(activation_bits=4)


@pytest.mark.parametrize(
    "name", ["tiny_cnn", "ds_cnn", "resnet8", "mobilenet_v1_025", "fc_autoencoder", "mobilenet_v2_035"]
)
def test_every_mac_of_a_zoo_model_is_quantized(name):
    from kiln.frontend.export import export, load_model

    model = load_model(name)
    q = quantize(export(model).module(check_guards=False), [model.inputs], EthosUQuantizer())
    macs = [n for n in q.graph.nodes if n.target in (aten.conv2d.default, aten.linear.default)]
    assert macs
    for mac in macs:
        assert mac.args[0].target == qd.dequantize_per_tensor.default, mac.name
        assert mac.args[1].target == qd.dequantize_per_channel.default, mac.name


def test_digits_int8_accuracy_is_within_one_percent_of_float():
    """Real data: the held-out split of scikit-learn's digits, calibrated on training images."""
    from kiln.frontend.export import export, load_model
    from kiln.models import digits

    model = load_model("digits")
    x_train, _ = digits.train_split()
    x_test, y_test = digits.test_split()
    q = quantize(
        export(model).module(check_guards=False), [(x_train[i : i + 1],) for i in range(200)], EthosUQuantizer()
    )
    with torch.no_grad():
        float_accuracy = (model.module(x_test).argmax(1) == y_test).float().mean().item()
        int8 = torch.cat([q(x_test[i : i + 1]) for i in range(len(x_test))])
    int8_accuracy = (int8.argmax(1) == y_test).float().mean().item()
    assert int8_accuracy >= float_accuracy - 0.01


# ---- what the quantizer annotates after normalisation ----------------------------------------------------
class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def quantized_fn(fn, *xs):
    module = torch.export.export(Fn(fn).eval(), xs, strict=False).module(check_guards=False)
    return quantize(module, [xs], EthosUQuantizer())


UNARY = {
    aten.gelu.default: nn.functional.gelu,
    aten.silu.default: nn.functional.silu,
    aten.elu.default: nn.functional.elu,
    aten.mish.default: nn.functional.mish,
    aten.softplus.default: nn.functional.softplus,
    aten.sqrt.default: lambda x: torch.sqrt(x + 4),
    aten.rsqrt.default: lambda x: torch.rsqrt(x + 4),
    aten.sin.default: torch.sin,
    aten.abs.default: torch.abs,
    aten.neg.default: torch.neg,
    aten.floor.default: lambda x: torch.floor(x + 0.5),
    aten.hardswish.default: nn.functional.hardswish,
}


@pytest.mark.parametrize("target", UNARY, ids=str)
def test_unary_functions_get_their_own_output_range(target):
    """Each unary function is one op with an observed input and its own observed output (the NPU's
    8-bit table maps one to the other): on inputs in [-1, 3], no output range equals its input's."""
    x = torch.linspace(-1, 3, 64).reshape(1, 64)
    q = quantized_fn(UNARY[target], x * 1)
    n = node(q, target)
    assert output_qparams(n) is not None and input_qparams(n) != output_qparams(n)


SHARED = {
    aten.slice.Tensor: lambda x: x[:, 1:5],
    aten.select.int: lambda x: x[:, 2],
    aten.flip.default: lambda x: torch.flip(x, [-1]),
    aten.expand.default: lambda x: x[:, :1].expand(2, 6, 8),
    aten.permute.default: lambda x: x.permute(0, 2, 1),
    aten.pad.default: lambda x: nn.functional.pad(x, [1, 2], mode="replicate"),
    aten.amin.default: lambda x: torch.amin(x, -1),
}


@pytest.mark.parametrize("target", SHARED, ids=str)
def test_data_movement_output_shares_the_input_range(target):
    q = quantized_fn(lambda x: SHARED[target](torch.tanh(x)) * 3, torch.randn(2, 6, 8))
    n = node(q, target)
    assert output_qparams(n) == input_qparams(n)


@pytest.mark.parametrize(
    "target,fn",
    [(aten.minimum.default, torch.minimum), (aten.maximum.default, torch.maximum)],
    ids=["minimum", "maximum"],
)
def test_minimum_and_maximum_share_one_range_like_cat(target, fn):
    q = quantized_fn(lambda a, b: fn(a, b * 3), torch.randn(2, 8), torch.randn(2, 8))
    n = node(q, target)
    assert input_qparams(n, 0) == input_qparams(n, 1) == output_qparams(n)


def test_integer_tensors_are_never_observed():
    """A mul of int32 tensors quantizes (it used to fail in the histogram observer) and stays as it is."""
    a, b = torch.arange(-6, 6, dtype=torch.int32).reshape(3, 4), torch.arange(12, dtype=torch.int32).reshape(3, 4)
    q = quantized_fn(lambda a, b: a * b, a, b)
    assert not [n for n in q.graph.nodes if n.target in (qd.quantize_per_tensor.default,)]
    assert torch.equal(q(a, b), a * b)
    g = graph.from_pt2e(q)
    (op,) = g.ops
    assert [(v.dtype, v.qparams) for v in op.inputs + op.outputs] == [("int32", None)] * 3


def test_a_bool_condition_flows_as_bool_into_a_quantized_where():
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    q = quantized_fn(lambda a, b: torch.where(a > b, torch.tanh(a), b), x, y)
    where = node(q, aten.where.self)
    assert where.args[0].target is aten.gt.Tensor  # the condition is not quantized
    assert output_qparams(where) is not None
    g = graph.from_pt2e(q)
    (op,) = [o for o in g.ops if o.target is aten.where.self]
    assert op.quantized and op.inputs[0].dtype == "bool" and op.inputs[0].qparams is None
    assert [v.dtype for v in op.inputs[1:]] == ["int8", "int8"]


def test_argmax_indices_are_not_observed():
    q = quantized_fn(lambda x: torch.max(torch.tanh(x), dim=1).indices, torch.randn(2, 8))
    assert node(q, aten.argmax.default).args[0].target is qd.dequantize_per_tensor.default
    assert output_qparams(node(q, aten.argmax.default)) is None


def test_an_op_with_two_outputs_is_one_op_with_two_values():
    """topk stays whole: one float Op whose outputs are the values and the indices; the getitem
    nodes reading them are not ops, and an output nothing reads still has its Value."""
    module = torch.export.export(Fn(lambda x: torch.topk(x, 2).values), (torch.randn(2, 8),), strict=False).module(
        check_guards=False
    )
    g = graph.from_pt2e(module)
    (op,) = [op for op in g.ops if op.op_type == "aten.topk"]
    assert [(v.dtype, v.shape) for v in op.outputs] == [("float32", (2, 2)), ("int64", (2, 2))]
    assert all(v.producer is op for v in op.outputs)
    assert g.outputs == [op.outputs[0]] and not op.outputs[1].users
    assert not any("getitem" in o.op_type for o in g.ops)


def test_sort_is_not_annotated_its_input_is_dequantized_and_its_outputs_quantized_after():
    """sort and topk stay in float: a quantized input is dequantized for them; their values
    are quantized again by the ops that read them, their int64 indices never observed."""

    def fn(x):
        s = torch.sort(torch.tanh(x), 1)
        return torch.tanh(s.values) + s.indices.float()

    q = quantized_fn(fn, torch.randn(2, 8))
    sort = node(q, aten.sort.default)
    assert sort.args[0].target is qd.dequantize_per_tensor.default
    values, indices = sorted(sort.users, key=lambda u: u.args[1])
    assert [u.target for u in values.users] == [qd.quantize_per_tensor.default]
    assert all(u.target is not qd.quantize_per_tensor.default for u in indices.users)
    g = graph.from_pt2e(q)
    (op,) = [op for op in g.ops if op.op_type == "aten.sort"]
    assert not op.quantized and op.inputs[0].producer.target is qd.dequantize_per_tensor.default
    assert [v.dtype for v in op.outputs] == ["float32", "int64"]


class Scaled(nn.Module):
    """A model scaling its input by 1e-3 before a convolution, whose output is scaled by 1e-2
    again: activations with ranges of about 0.006 and 0.0002."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        y = torch.relu(self.conv(x * 1e-3))
        return self.head(y.mean((2, 3))) * 1e-2


def test_tensors_with_tiny_ranges_keep_their_resolution():
    """Every scale at or above the floor the NPU's rescale takes (2**-16, ExecuTorch's too), so a
    tensor of range 0.006 keeps 8 bits: kiln's program on its NPU model (run-host) is within a step
    of the PT2E reference and within 2 % of the output's range of float, with float's top class
    (under the old floor, 2**-12, the output's scale was the floor, 14 times its range / 255)."""
    from kiln import compile as kc
    from kiln.frontend import export as frontend
    from kiln.frontend.quantizer import SCALE_FLOOR
    from kiln.reference import run_host as host
    from kiln.spec import CompileSpec

    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(5))
    model = Scaled().eval()
    want = model(x).detach()
    loaded = frontend.LoadedModel("scaled", model, (x,))
    result = kc.compile_model(loaded, CompileSpec("ethos-u55-128"), log=lambda line: None)
    assert result.report["macs"]["npu_share"] == 1.0
    (got,) = host.run(result.pte, [x.numpy()])
    ref = quantized(Scaled(), x)(x).detach()
    scale = result.graph.outputs[0].producer.inputs[0].qparams.scale
    spread = float(want.max() - want.min())
    assert spread < 255 * 2**-12  # a range the old floor cut to fewer than 255 steps
    assert scale == pytest.approx(spread / 255, rel=0.05)
    assert float((torch.from_numpy(got) - ref).abs().max()) <= 1.01 * scale
    assert float((torch.from_numpy(got) - want).abs().max()) <= 0.02 * spread
    assert int(got.argmax()) == int(want.argmax())
    scaled_input = node(quantized(Scaled(), x), aten.mul.Tensor)
    assert output_qparams(scaled_input)[0] > SCALE_FLOOR


def test_the_scale_floor_is_the_one_the_rescale_represents():
    """The floor's derivation (kiln.frontend.quantizer): the factors a floored scale makes, s / floor for
    s below 2**13 and floor**2 for a MAC, are what kiln's TOSA RESCALE encodes, the latter at
    full precision (a 31-bit multiplier) with shift 62, its largest."""
    from kiln.errors import LoweringError
    from kiln.frontend.quantizer import SCALE_FLOOR
    from kiln.lower.lowerer import scale_to_multiplier

    multiplier, shift = scale_to_multiplier(SCALE_FLOOR * SCALE_FLOOR)
    assert (multiplier, shift) == (2**30, 62)
    multiplier, shift = scale_to_multiplier(2**13 * 0.999 / SCALE_FLOOR)
    assert shift >= 2 and multiplier * 2.0**-shift == pytest.approx(2**13 * 0.999 / SCALE_FLOOR)
    with pytest.raises(LoweringError):
        scale_to_multiplier(2**13 * 2 / SCALE_FLOOR)


def _observations(case: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Seeded calibration batches of several shapes of distribution: normal, heavy-tailed,
    uniform, with far outliers, a few discrete values, tiny non-negative values."""
    n = (10, 1000, 20000)[case % 3]
    kind = case % 6
    if kind == 0:
        x = torch.randn(n, generator=generator)
    elif kind == 1:
        x = torch.randn(n, generator=generator) ** 3
    elif kind == 2:
        x = torch.rand(n, generator=generator) * 6 - 1
    elif kind == 3:
        x = torch.cat([torch.randn(n, generator=generator), torch.tensor([50.0, -40.0])])
    elif kind == 4:
        x = torch.randint(0, 3, (n,), generator=generator).float()
    else:
        x = torch.relu(torch.randn(n, generator=generator)) * 1e-3
    return list(x.split(max(1, n // 3)))


@pytest.mark.parametrize("case", range(18))
def test_the_activation_observer_finds_torchaos_range(case):
    """kiln's activation observer searches the histogram's range its own way
    (kiln.frontend.histogram): the range is torchao's HistogramObserver's, to the bit, for the
    same observations."""
    from torchao.quantization.pt2e.observer import HistogramObserver

    from kiln.frontend.quantizer import MaskAwareHistogramObserver

    theirs, ours = HistogramObserver(), MaskAwareHistogramObserver()
    for batch in _observations(case, torch.Generator().manual_seed(case)):
        theirs(batch)
        ours(batch)
    want, got = theirs._non_linear_param_search(), ours._non_linear_param_search()
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (got, want)
    assert torch.equal(ours.calculate_qparams()[0], theirs.calculate_qparams()[0])


def test_float32_rounding_of_a_threshold_is_torchs():
    """histogram.float32_below(c)(x) is torch's `c > x` for a float32 element c and a Python
    float x (x rounded to float32, ties to even): around c's lower midpoint, and at 0."""
    import numpy as np

    from kiln.frontend.histogram import float32_below

    for c in (1.0, 3.0, 1.5, 1000.0, 2.0**-130, 7.0e6 + 1):
        element = torch.tensor(c, dtype=torch.float32)
        below = float(np.nextafter(np.float32(c), np.float32(0)))
        mid = (below + float(element)) / 2
        for x in (below, np.nextafter(mid, 0), mid, np.nextafter(mid, 2 * mid), float(element), 0.0):
            assert float32_below(float(element))(float(x)) == bool(element > float(x)), (c, x)
    assert not float32_below(0.0)(0.0) and not bool(torch.tensor(0.0) > 0.0)
