"""Command-stream features Vela emits only for TFLite graphs: int16 LEAKY_RELU (the
LRELU elementwise mode) and int16 TANH/LOGISTIC (the built-in TANH/SIGMOID activations).
Each model is compiled by Vela and run on kiln's NPU model over all 65,536 int16 inputs.

References: LRELU against tosa_reference_model running max(x, alpha x) with alpha
quantized as TFLite quantizes it; TANH/SIGMOID against values worked out by hand and against
LiteRT's reference int16 kernels (ai-edge-litert, a test dependency) on every input."""

from __future__ import annotations

import numpy as np
import pytest
import tosa_serializer as ts

from kiln.lower import vela
from tests.simulator import helpers, npu_cases, npu_tflite

EVERY_INT16 = np.arange(-32768, 32768, dtype=np.int16).reshape(1, 256, 256, 1)


def _compile(model: bytes, name: str, target: str) -> vela.VelaResult:
    """Vela's output for a TFLite flatbuffer (vela.run reads the file's suffix to know the format)."""
    return vela.run(model, f"{name}.tflite", target, helpers.system_config(target), "Shared_Sram").result


def _run(model: bytes, name: str, target: str, x: np.ndarray):
    (out,), result = helpers.run_on_model(_compile(model, name, target), [x], target, [np.int16])
    assert result.fault is None, result.fault
    return out.reshape(x.shape), result


def _leaky_relu_reference(x: np.ndarray, alpha: float) -> np.ndarray:
    """tosa_reference_model on max(x, rescale(x, alpha)) with TFLite's 32-bit multiplier
    for alpha (double rounding, as TFLite's MultiplyByQuantizedMultiplier); 0 < alpha < 1."""
    g = npu_cases.Graph()
    shape = list(x.shape)
    name = g.input(x, "int16")
    identity = g.rescale(name, shape, "int16", "int32", 1.0)
    scaled = g.rescale(name, shape, "int16", "int32", alpha, double_round=True)
    y = g.op("MAXIMUM", [identity, scaled], shape, "int32", npu_cases.attr("Maximum", ts.NanPropagationMode.PROPAGATE))
    g.output(g.rescale(y, shape, "int32", "int16", 1.0), f"LEAKY_RELU alpha {alpha}")
    (want,) = helpers.reference(g.serialize(), g.inputs)
    return want.reshape(x.shape)


@pytest.mark.parametrize("target, seed", [("ethos-u55-64", 1), ("ethos-u65-512", 2)])
def test_leaky_relu_int16_is_lrelu_and_bit_exact(target, seed):
    rng = np.random.default_rng(seed)
    alpha = float(np.float32(rng.uniform(0.01, 0.99)))  # the model stores alpha as float32
    scale = float(np.exp(rng.uniform(-8, 0)))
    model = npu_tflite.single_op(npu_tflite.LEAKY_RELU, list(EVERY_INT16.shape), scale, scale, alpha=alpha)
    got, result = _run(model, f"lrelu{seed}", target, EVERY_INT16)
    assert result.coverage.counts[("elementwise", "LRELU")] >= 1
    want = _leaky_relu_reference(EVERY_INT16, alpha)
    wrong = np.flatnonzero(got != want)
    assert wrong.size == 0, (
        alpha,
        EVERY_INT16.reshape(-1)[wrong[:5]],
        got.reshape(-1)[wrong[:5]],
        want.reshape(-1)[wrong[:5]],
    )


# Input scale 2^-12: regor sets OFM_SCALE to 3 (shift 0), so the activation sees 3x in
# units of 1/0x3000, i.e. x / 4096. Worked out from the published table
# sigmoid(i/24) * 65536 (entry 0 = 32768, entry 3 = 34813):
#   tanh:    x = 256 -> 3x = 768 = entry 3 exactly: (34813 * 256 - 2^23 + 2^7) >> 8 = 2045
#            (tanh(1/16) * 32768 = 2045.4); x = -256 mirrors to -2045; |3x| >= 255 * 256
#            saturates: (0xFFFF * 256 - 2^23 + 2^7) >> 8 = 32767 and, for negative x,
#            (-0xFFFF * 256 + 2^23 + 2^7 - 1) >> 8 = -32767.
#   sigmoid: x = 0 -> (32768 * 512 + 2^9) >> 10 = 16384; x = 512 -> 3x = 1536 = entry 3:
#            (34813 * 512 + 2^9) >> 10 = 17407 (sigmoid(1/8) * 32768 = 17407.0);
#            x = -512 -> (2^25 - 34813 * 512 + 2^9 - 1) >> 10 = 15361.
HAND_VALUES = {
    npu_tflite.TANH: {0: 0, 256: 2045, -256: -2045, 32767: 32767, -32768: -32767},
    npu_tflite.LOGISTIC: {0: 16384, 512: 17407, -512: 15361},
}


@pytest.mark.parametrize("opcode", [npu_tflite.TANH, npu_tflite.LOGISTIC], ids=["tanh", "sigmoid"])
def test_builtin_activation_hand_values(opcode):
    values = HAND_VALUES[opcode]
    x = np.array(list(values), np.int16).reshape(1, 1, len(values), 1)
    model = npu_tflite.single_op(opcode, list(x.shape), 1.0 / 4096, npu_tflite.Q15)
    got, result = _run(model, f"act{opcode}", "ethos-u55-128", x)
    name = "TANH" if opcode == npu_tflite.TANH else "SIGMOID"
    assert result.coverage.counts[("activation", name)] == 1
    assert got.reshape(-1).tolist() == list(values.values())


def _litert_reference(model: bytes, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert import interpreter as interpreter_module

    # The reference kernels: for power-of-two input scales LiteRT's default (optimized)
    # int16 TANH/LOGISTIC compute in gemmlowp fixed point instead of the table, and
    # differ from it by up to 12; Vela's OFM_SCALE (3 << shift, shift 0) is the table's.
    interpreter = interpreter_module.Interpreter(
        model_content=model, experimental_op_resolver_type=interpreter_module.OpResolverType.BUILTIN_REF
    )
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).copy()


# (operator, input scale): power-of-two scales take regor's special case (multiplier 3 <<
# shift); the others its general multiplier of about 0x3000 * scale * 2^shift.
LITERT_CASES = [
    (npu_tflite.TANH, 2.0**-12),
    (npu_tflite.TANH, 2.0**-11),
    (npu_tflite.TANH, 3.0e-4),
    (npu_tflite.TANH, 0.01),
    (npu_tflite.LOGISTIC, 2.0**-12),
    (npu_tflite.LOGISTIC, 7.1e-4),
    (npu_tflite.LOGISTIC, 1.0e-5),
]


@pytest.mark.parametrize(
    "opcode, scale",
    LITERT_CASES,
    ids=[f"{'tanh' if o == npu_tflite.TANH else 'sigmoid'}-{s:.3g}" for o, s in LITERT_CASES],
)
def test_builtin_activation_matches_litert_on_every_int16(opcode, scale):
    model = npu_tflite.single_op(opcode, list(EVERY_INT16.shape), scale, npu_tflite.Q15)
    want = _litert_reference(model, EVERY_INT16)
    got, _ = _run(model, f"act{opcode}", "ethos-u55-256", EVERY_INT16)
    wrong = np.flatnonzero(got != want)
    assert wrong.size == 0, (
        EVERY_INT16.reshape(-1)[wrong[:5]],
        got.reshape(-1)[wrong[:5]],
        want.reshape(-1)[wrong[:5]],
    )
