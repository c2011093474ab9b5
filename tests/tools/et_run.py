"""Runs a sequence of method calls on one .pte with ExecuTorch's own runtime (its Python
bindings over the C++ runtime and portable kernels; run it with the throwaway environment's
Python, .venv-executorch/bin/python; kiln is not imported).

    python et_run.py FILE.pte CALLS.json  ->  [[output bytes as hex, ...] per call]

CALLS.json: [{"method": NAME, "inputs": [{"dtype": "float32", "shape": [4], "hex": "..."}, ...]}, ...].
Every method is loaded once, before the first call, from one Program: ExecuTorch gives methods
whose buffers are all on the host one set of planned arenas, so a program exported with shared
mutable buffers (memory id 2) carries its state from one call to the next, whichever method
makes it.
"""

import json
import sys


def main(pte: str, calls_path: str) -> None:
    import numpy as np
    import torch
    from executorch.runtime import Runtime

    calls = json.load(open(calls_path))
    program = Runtime.get().load_program(pte)
    methods = {name: program.load_method(name) for name in sorted({c["method"] for c in calls})}
    results = []
    for call in calls:
        inputs = [
            torch.from_numpy(np.frombuffer(bytes.fromhex(i["hex"]), i["dtype"]).reshape(i["shape"]).copy())
            for i in call["inputs"]
        ]
        outputs = methods[call["method"]].execute(inputs)
        results.append([o.contiguous().numpy().tobytes().hex() for o in outputs])
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main(*sys.argv[1:])
