"""ExecuTorch's BundledProgram format (.bpte): a .pte with test cases, inputs and the outputs they
must give, per method. Schema: ExecuTorch 1.5.1's devtools/bundled_program/schema/
bundled_program_schema.fbs (file identifier BP08); the facts below are its field order and
alignments. kiln writes it with kiln.pte.writer's FlatBuffer builder and reads it with
kiln.pte.reader's bounds-checked reader; the firmware's reader is
firmware/apps/executor_runner/bundle.cpp, whose slots are these.

    BundledProgram         { version: uint; method_test_suites: [BundledMethodTestSuite];
                             program: [ubyte] (force_align 32) }   the whole .pte
    BundledMethodTestSuite { method_name: string; test_cases: [BundledMethodTestCase] }
    BundledMethodTestCase  { inputs: [Value]; expected_outputs: [Value] }
    Value                  { val: ValueUnion }   Tensor = 1, Int = 2, Bool = 3, Double = 4
    Tensor                 { scalar_type: byte; sizes: [int]; data: [ubyte] (force_align 16);
                             dim_order: [ubyte] }
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from kiln.errors import PteError
from kiln.pte.dim_order import from_memory
from kiln.pte.reader import _F64, _I8, _I64, _U8, _U32, _Reader, _Table
from kiln.pte.schema import ELEMENT_SIZE, NUMPY_DTYPES, SCALAR_TYPES, ScalarType
from kiln.pte.writer import _Writer

BUNDLE_IDENTIFIER = b"BP08"
BUNDLE_EXTENSION = ".bpte"
BUNDLE_VERSION = 2  # BundledProgram.version ExecuTorch 1.5.1 writes (devtools/bundled_program/version.py)
PROGRAM_ALIGNMENT = 32  # the program vector's force_align
TENSOR_DATA_ALIGNMENT = 16  # Tensor.data's force_align


class BundleSlot(IntEnum):
    version = 0
    method_test_suites = 1
    program = 2


class SuiteSlot(IntEnum):
    method_name = 0
    test_cases = 1


class CaseSlot(IntEnum):
    inputs = 0
    expected_outputs = 1


class BundleTensorSlot(IntEnum):
    scalar_type = 0
    sizes = 1
    data = 2
    dim_order = 3


class ValueKind(IntEnum):
    """ValueUnion's type codes (Value's slot 0; its table at slot 1)."""

    Tensor = 1
    Int = 2
    Bool = 3
    Double = 4


@dataclass(frozen=True)
class BundleTensor:
    scalar_type: ScalarType
    sizes: tuple[int, ...]
    data: bytes
    dim_order: tuple[int, ...]

    @staticmethod
    def of(array: np.ndarray) -> BundleTensor:
        """`array` (one of kiln's element types) as a contiguous tensor in little-endian bytes."""
        a = np.ascontiguousarray(array)
        code = SCALAR_TYPES.get(a.dtype.name)
        if code is None:
            raise PteError(f"a bundle tensor of numpy type {a.dtype.name}: kiln writes {sorted(SCALAR_TYPES)}")
        return BundleTensor(code, tuple(a.shape), a.astype(a.dtype.newbyteorder("<")).tobytes(), tuple(range(a.ndim)))

    def array(self) -> np.ndarray:
        """The tensor as a numpy array in the order of its sizes, from its bytes in its dim order
        (PteError when its bytes do not fill its sizes or the order is not a permutation)."""
        dtype = NUMPY_DTYPES.get(self.scalar_type)
        if dtype is None:
            raise PteError(f"a bundle tensor of scalar type {self.scalar_type.name}: kiln reads {sorted(SCALAR_TYPES)}")
        n = int(np.prod(self.sizes, dtype=np.int64))
        if n * ELEMENT_SIZE[self.scalar_type] != len(self.data):
            raise PteError(
                f"a bundle tensor of {self.scalar_type.name} {list(self.sizes)} holds {len(self.data)} bytes"
            )
        flat = np.frombuffer(self.data, np.dtype(dtype).newbyteorder("<"))
        if sorted(self.dim_order) != list(range(len(self.sizes))):
            raise PteError(f"a bundle tensor of sizes {list(self.sizes)} has dim_order {list(self.dim_order)}")
        return from_memory(flat, self.sizes, self.dim_order)


BundleValue = BundleTensor | int | bool | float


@dataclass(frozen=True)
class MethodCase:
    inputs: list[BundleValue]
    expected_outputs: list[BundleValue]


@dataclass(frozen=True)
class MethodSuite:
    method_name: str
    cases: list[MethodCase]


@dataclass(frozen=True)
class Bundle:
    program: bytes  # the whole .pte
    suites: list[MethodSuite]
    version: int = BUNDLE_VERSION


def is_bundle(data: bytes) -> bool:
    """Whether `data` carries the bundle's file identifier."""
    return len(data) >= 8 and bytes(data[4:8]) == BUNDLE_IDENTIFIER


# --- writing ---------------------------------------------------------------------------------


def _value(w: _Writer, v: BundleValue, at: str) -> int:
    if isinstance(v, BundleTensor):
        sizes = w.scalars("i32", v.sizes, f"{at}.sizes")
        data = w.blob(v.data, TENSOR_DATA_ALIGNMENT)
        dim_order = w.scalars("u8", v.dim_order, f"{at}.dim_order")
        fields = [
            (BundleTensorSlot.scalar_type, "i8", int(v.scalar_type)),
            (BundleTensorSlot.sizes, "off", sizes),
            (BundleTensorSlot.data, "off", data),
            (BundleTensorSlot.dim_order, "off", dim_order),
        ]
        kind, table = ValueKind.Tensor, w.table(len(BundleTensorSlot), fields, at)
    elif isinstance(v, bool):  # before int: a bool is an int
        kind, table = ValueKind.Bool, w.table(1, [(0, "bool", v)], at)
    elif isinstance(v, int):
        kind, table = ValueKind.Int, w.table(1, [(0, "i64", v)], at)
    elif isinstance(v, float):
        kind, table = ValueKind.Double, w.table(1, [(0, "f64", v)], at)
    else:
        raise PteError(f"{at} is a {type(v).__name__}, not a bundle value (tensor, int, bool, float)")
    return w.table(2, [(0, "u8", int(kind)), (1, "off", table)], at)


def serialize_bundle(bundle: Bundle) -> bytes:
    """The .bpte bytes of `bundle`, in the field order and alignments ExecuTorch 1.5.1 writes."""
    w = _Writer()
    suites = []
    for i, suite in enumerate(bundle.suites):
        cases = []
        for k, case in enumerate(suite.cases):
            at = f"method_test_suites[{i}].test_cases[{k}]"
            inputs = w.tables([_value(w, v, f"{at}.inputs[{j}]") for j, v in enumerate(case.inputs)])
            outputs = w.tables(
                [_value(w, v, f"{at}.expected_outputs[{j}]") for j, v in enumerate(case.expected_outputs)]
            )
            cases.append(
                w.table(
                    len(CaseSlot), [(CaseSlot.inputs, "off", inputs), (CaseSlot.expected_outputs, "off", outputs)], at
                )
            )
        name = w.string(suite.method_name)
        fields = [(SuiteSlot.method_name, "off", name), (SuiteSlot.test_cases, "off", w.tables(cases))]
        suites.append(w.table(len(SuiteSlot), fields, f"method_test_suites[{i}]"))
    suite_vector = w.tables(suites)
    program = w.blob(bundle.program, PROGRAM_ALIGNMENT)
    root = w.table(
        len(BundleSlot),
        [
            (BundleSlot.version, "u32", bundle.version),
            (BundleSlot.method_test_suites, "off", suite_vector),
            (BundleSlot.program, "off", program),
        ],
        "BundledProgram",
    )
    w.b.Finish(root, file_identifier=BUNDLE_IDENTIFIER)
    return bytes(w.b.Output())


# --- reading ---------------------------------------------------------------------------------


def _read_value(t: _Table) -> BundleValue:
    code, v = t.union(0, "val", ValueKind)
    if code == ValueKind.Int:
        return v.scalar(0, _I64, "int_val")
    if code == ValueKind.Bool:
        return bool(v.scalar(0, _U8, "bool_val"))
    if code == ValueKind.Double:
        return v.scalar(0, _F64, "double_val", 0.0)
    scalar_type = v.scalar(BundleTensorSlot.scalar_type, _I8, "scalar_type")
    if scalar_type not in ScalarType._value2member_map_:
        raise PteError(f"{v.what}.scalar_type is {scalar_type}, not a ScalarType")
    return BundleTensor(
        ScalarType(scalar_type),
        tuple(v.scalars(BundleTensorSlot.sizes, "i", "sizes")),
        v.blob(BundleTensorSlot.data, "data"),
        tuple(v.scalars(BundleTensorSlot.dim_order, "B", "dim_order")),
    )


def deserialize_bundle(data: bytes) -> Bundle:
    """Reads a .bpte (kiln's or ExecuTorch 1.5.1's); PteError, naming the field, for anything
    malformed: a bad identifier, offsets outside the file, an unknown value kind. The program
    inside is returned as bytes, unread (kiln.pte.reader.deserialize reads it)."""
    data = bytes(data)
    if len(data) < 8:
        raise PteError(f"not an ExecuTorch bundled program: {len(data)} bytes is too short")
    if not is_bundle(data):
        raise PteError(
            f"not an ExecuTorch bundled program: file identifier is {data[4:8]!r}, expected {BUNDLE_IDENTIFIER!r}"
        )
    reader = _Reader(memoryview(data))
    root = reader.table(reader.get(_U32, 0, "root offset"), "BundledProgram")
    suites = []
    for s in root.tables(BundleSlot.method_test_suites, "method_test_suites"):
        cases = [
            MethodCase(
                [_read_value(v) for v in c.tables(CaseSlot.inputs, "inputs")],
                [_read_value(v) for v in c.tables(CaseSlot.expected_outputs, "expected_outputs")],
            )
            for c in s.tables(SuiteSlot.test_cases, "test_cases")
        ]
        suites.append(MethodSuite(s.string(SuiteSlot.method_name, "method_name"), cases))
    program = root.blob(BundleSlot.program, "program")
    if not program:
        raise PteError("BundledProgram.program is missing: the bundle holds no program")
    return Bundle(program, suites, root.scalar(BundleSlot.version, _U32, "version"))


def program_of(data: bytes) -> bytes:
    """The .pte inside `data` when it is a bundle, else `data` itself."""
    return deserialize_bundle(data).program if is_bundle(data) else bytes(data)
