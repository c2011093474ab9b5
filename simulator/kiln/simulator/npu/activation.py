"""The built-in TANH and SIGMOID activation functions (ACTIVATION function 3 and 4).

Vela emits them only for int16 TFLite TANH and LOGISTIC (regor lowers TOSA INT sigmoid
and tanh to TABLE): a 1x1 average pool whose OFM_SCALE brings the int16 input to a fixed
point in which 3 * 4096 stands for 1.0 (multiplier 3, shift 0 when the input scale is
2^-12, or 2^-11 for TANH; otherwise about 0x3000 * scale * 2^shift). The functions then
interpolate a 256-entry table of sigmoid(i / 24) * 65536 and give a Q0.15 result.

The semantics are those of TFLite's reference int16 kernels (reference_integer_ops::Tanh
and ::Logistic), whose register values regor's match; tests/simulator/test_npu_tflite.py
compares the model with LiteRT's reference kernels on every int16 input. They are not
checked against hardware.

Contract: `x` is the scaled accumulator (int64 array, any shape); the result is an int64
array of the same shape holding int16 values.
"""

from __future__ import annotations

import numpy as np

# sigmoid(i / 24) * 65536 for i = 0..255, as the table is published (its entries are tuned
# for interpolation: they are not all the nearest integer to that value).
SIGMOID_TABLE = np.array([
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064, 42688,
    43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409,
    51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110,
    61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186,
    63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900,
    64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208,
    65221, 65234, 65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449,
    65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530,
    65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535,
], dtype=np.int64)
_LAST = len(SIGMOID_TABLE) - 1


def _interpolate(magnitude: np.ndarray, fraction_bits: int) -> np.ndarray:
    """(inside, value): the table at magnitude / 2^fraction_bits, linearly interpolated
    and scaled by 2^fraction_bits; inside is False where the index reaches the last entry
    (value is then meaningless and the caller saturates)."""
    index = magnitude >> fraction_bits
    inside = index < _LAST
    i = np.where(inside, index, 0)
    low, high = SIGMOID_TABLE[i], SIGMOID_TABLE[i + 1]
    fraction = magnitude & ((1 << fraction_bits) - 1)
    return inside, (low << fraction_bits) + fraction * (high - low)


def tanh(x: np.ndarray) -> np.ndarray:
    """tanh(x / 0x3000) in Q0.15: tanh(y) = 2 sigmoid(2y) - 1 with the table read at
    |x| / 2^8 (= 24 * 2|x| / 0x3000), rounded half up, negative inputs mirrored."""
    x = np.asarray(x, np.int64)
    inside, value = _interpolate(np.abs(x), 8)
    value = np.where(inside, value, 0xFFFF << 8)
    half = 1 << 23  # 0.5 of the table's 2^16 * 2^8 scale: 2 sigmoid - 1 centres on it
    rounding = 1 << 7
    result = np.where(x >= 0, value - half + rounding, half - value + rounding - 1)
    return result >> 8


def sigmoid(x: np.ndarray) -> np.ndarray:
    """sigmoid(x / 0x3000) in Q0.15: the table read at |x| / 2^9 (= 24 |x| / 0x3000),
    rounded half up, negative inputs as 1 - sigmoid(-x)."""
    x = np.asarray(x, np.int64)
    inside, value = _interpolate(np.abs(x), 9)
    value = np.where(inside, value, 0x7FFF << 10)
    rounding = 1 << 9
    result = np.where(x >= 0, value + rounding, (1 << 25) - value + rounding - 1)
    return result >> 10
