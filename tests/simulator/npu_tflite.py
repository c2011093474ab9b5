"""Single-operator int16 TFLite models for the NPU model tests.

Vela emits some command-stream features only for TFLite graphs, never for TOSA (see
simulator/kiln/simulator/npu/u55/COVERAGE.md): the built-in TANH/SIGMOID activations (int16
TANH and LOGISTIC) and the LRELU elementwise mode (int16 LEAKY_RELU with equal input and
output scales and alpha > 0). This writes such a model with the TFLite schema bindings that ship
with Vela (ethosu.vela.tflite)."""

from __future__ import annotations

import flatbuffers
from ethosu.vela.tflite import (
    Buffer,
    BuiltinOperator,
    BuiltinOptions,
    LeakyReluOptions,
    Model,
    Operator,
    OperatorCode,
    QuantizationParameters,
    SubGraph,
    Tensor,
    TensorType,
)

TANH = BuiltinOperator.BuiltinOperator.TANH
LOGISTIC = BuiltinOperator.BuiltinOperator.LOGISTIC
LEAKY_RELU = BuiltinOperator.BuiltinOperator.LEAKY_RELU
# TFLite's int16 TANH and LOGISTIC take an output scale of 2^-15 and zero points of 0.
Q15 = 1.0 / 32768


def _vector(builder, start, items, prepend) -> int:
    start(builder, len(items))
    for item in reversed(items):
        prepend(item)
    return builder.EndVector()


def single_op(
    opcode: int, shape: list[int], input_scale: float, output_scale: float, alpha: float | None = None
) -> bytes:
    """A model with one int16 input, one operator and one int16 output (zero points 0);
    `alpha` is LEAKY_RELU's option."""
    b = flatbuffers.Builder(1024)
    tensors = []
    for index, (name, scale) in enumerate((("input", input_scale), ("output", output_scale))):
        scales = _vector(b, QuantizationParameters.StartScaleVector, [scale], b.PrependFloat32)
        zero_points = _vector(b, QuantizationParameters.StartZeroPointVector, [0], b.PrependInt64)
        QuantizationParameters.Start(b)
        QuantizationParameters.AddScale(b, scales)
        QuantizationParameters.AddZeroPoint(b, zero_points)
        quantization = QuantizationParameters.End(b)
        label = b.CreateString(name)
        dims = _vector(b, Tensor.StartShapeVector, list(shape), b.PrependInt32)
        Tensor.Start(b)
        Tensor.AddShape(b, dims)
        Tensor.AddType(b, TensorType.TensorType.INT16)
        Tensor.AddBuffer(b, index + 1)  # buffer 0 is the schema's empty sentinel
        Tensor.AddName(b, label)
        Tensor.AddQuantization(b, quantization)
        tensors.append(Tensor.End(b))
    options = None
    if alpha is not None:
        LeakyReluOptions.Start(b)
        LeakyReluOptions.AddAlpha(b, alpha)
        options = LeakyReluOptions.End(b)
    inputs = _vector(b, Operator.StartInputsVector, [0], b.PrependInt32)
    outputs = _vector(b, Operator.StartOutputsVector, [1], b.PrependInt32)
    Operator.Start(b)
    Operator.AddOpcodeIndex(b, 0)
    Operator.AddInputs(b, inputs)
    Operator.AddOutputs(b, outputs)
    if options is not None:
        Operator.AddBuiltinOptionsType(b, BuiltinOptions.BuiltinOptions.LeakyReluOptions)
        Operator.AddBuiltinOptions(b, options)
    operator = Operator.End(b)
    tensor_vector = _vector(b, SubGraph.StartTensorsVector, tensors, b.PrependUOffsetTRelative)
    graph_inputs = _vector(b, SubGraph.StartInputsVector, [0], b.PrependInt32)
    graph_outputs = _vector(b, SubGraph.StartOutputsVector, [1], b.PrependInt32)
    operators = _vector(b, SubGraph.StartOperatorsVector, [operator], b.PrependUOffsetTRelative)
    SubGraph.Start(b)
    SubGraph.AddTensors(b, tensor_vector)
    SubGraph.AddInputs(b, graph_inputs)
    SubGraph.AddOutputs(b, graph_outputs)
    SubGraph.AddOperators(b, operators)
    subgraph = SubGraph.End(b)
    OperatorCode.Start(b)
    OperatorCode.AddDeprecatedBuiltinCode(b, min(opcode, 127))  # the schema's 8-bit field saturates at 127
    OperatorCode.AddBuiltinCode(b, opcode)
    OperatorCode.AddVersion(b, 1)
    code = OperatorCode.End(b)
    buffers = []
    for _ in range(3):
        Buffer.Start(b)
        buffers.append(Buffer.End(b))
    buffer_vector = _vector(b, Model.StartBuffersVector, buffers, b.PrependUOffsetTRelative)
    codes = _vector(b, Model.StartOperatorCodesVector, [code], b.PrependUOffsetTRelative)
    subgraphs = _vector(b, Model.StartSubgraphsVector, [subgraph], b.PrependUOffsetTRelative)
    description = b.CreateString("kiln NPU model test")
    Model.Start(b)
    Model.AddVersion(b, 3)
    Model.AddOperatorCodes(b, codes)
    Model.AddSubgraphs(b, subgraphs)
    Model.AddDescription(b, description)
    Model.AddBuffers(b, buffer_vector)
    b.Finish(Model.End(b), b"TFL3")
    return bytes(b.Output())
