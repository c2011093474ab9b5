"""Dumps a .pte file as JSON using ExecuTorch's own Python deserializer (run it with the
throwaway environment's Python, .venv-executorch/bin/python; kiln is not imported).

    python et_dump.py FILE.pte  ->  {"header", "stored", "restored", "reserialized"}

header:       ExecuTorch's reading of the extended header (or null).
stored:       the Program FlatBuffer as stored (segments, constant_segment, delegate
              locations), parsed by ExecuTorch's generated FlatBuffer code.
restored:     deserialize_pte_binary's result: the program with segments moved back
              inline (constant_buffer, backend_delegate_data) and named data.
reserialized: header, segments and segment bytes of the same program written again by
              serialize_pte_binary as to_executorch() does by default (delegates in segments,
              segment alignment 128), to compare kiln's layout with ExecuTorch's.
Dataclasses become {"_type": name, field: ...}, bytes become hex strings, enums ints.
"""

import dataclasses
import enum
import json
import sys


def to_json(value):
    if dataclasses.is_dataclass(value):
        out = {"_type": type(value).__name__}
        for f in dataclasses.fields(value):
            out[f.name] = to_json(getattr(value, f.name))
        return out
    if isinstance(value, enum.Enum):
        return int(value.value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


def header_json(data: bytes):
    from executorch.exir._serialize._program import _get_extended_header

    header = _get_extended_header(data)
    if header is None:
        return None
    return {
        "length": header.length,
        "program_size": header.program_size,
        "segment_base_offset": header.segment_base_offset,
        "segment_data_size": header.segment_data_size,
    }


def main(path: str) -> None:
    from executorch.exir._serialize._flatbuffer_program import _flatbuffer_to_program
    from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary

    data = open(path, "rb").read()
    header = header_json(data)
    stored = _flatbuffer_to_program(data[: header["program_size"]] if header else data)
    pte = deserialize_pte_binary(data)
    named = {}
    if pte.named_data is not None:
        named = {
            key: pte.named_data.buffers[entry.buffer_index].hex() for key, entry in pte.named_data.pte_data.items()
        }
    restored = to_json(pte.program)

    again = bytes(serialize_pte_binary(pte, extract_delegate_segments=True, segment_alignment=128))
    again_header = header_json(again)
    again_program = _flatbuffer_to_program(again[: again_header["program_size"]] if again_header else again)
    base = again_header["segment_base_offset"] if again_header else len(again)
    json.dump(
        {
            "header": header,
            "stored": to_json(stored),
            "restored": restored,
            "named_data": named,
            "reserialized": {
                "header": again_header,
                "segments": to_json(again_program.segments),
                "constant_segment": to_json(again_program.constant_segment),
                "delegates": [to_json(d.processed) for plan in again_program.execution_plan for d in plan.delegates],
                "named_data": to_json(again_program.named_data),
                "segment_data": again[base:].hex(),
            },
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main(sys.argv[1])
