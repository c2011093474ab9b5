"""Reads an ETDump with ExecuTorch's own devtools (run it with the throwaway environment's Python,
.venv-executorch/bin/python; kiln is not imported).

    python et_etdump.py FILE.etdp [--inspector]  ->  {"etdump", "inspector"}

etdump:     deserialize_from_etdump_flatcc's result (the size-prefixed FlatBuffer through flatc and
            the etdump_schema_flatcc.fbs ExecuTorch ships), as et_dump.py writes dataclasses.
inspector:  (with --inspector, else null) the devtools Inspector's event table
            (Inspector.to_dataframe) with the time scale in cycles: per row event_block_name,
            event_name, raw (one duration per run), is_delegated_op, delegate_debug_identifier,
            start_time.
"""

import json
import sys
import warnings

from et_dump import to_json


def main(path: str, inspect: bool) -> dict:
    from executorch.devtools import Inspector
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc
    from executorch.devtools.inspector import TimeScale

    with open(path, "rb") as f:
        etdump = deserialize_from_etdump_flatcc(f.read())
    if not inspect:
        return {"etdump": to_json(etdump), "inspector": None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Output Buffer not found": no debug data is recorded
        inspector = Inspector(etdump_path=path, source_time_scale=TimeScale.CYCLES, target_time_scale=TimeScale.CYCLES)
    table = inspector.to_dataframe()
    columns = ["event_block_name", "event_name", "raw", "is_delegated_op", "delegate_debug_identifier", "start_time"]
    rows = [{c: row[c] for c in columns} for row in table[columns].to_dict("records")]
    return {"etdump": to_json(etdump), "inspector": json.loads(json.dumps(rows, default=str))}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], "--inspector" in sys.argv[2:])))
