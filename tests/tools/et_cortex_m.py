"""Calls ExecuTorch's Python implementations of its cortex_m operators (executorch/backends/
cortex_m/ops/operators.py; run it with the throwaway environment's Python,
.venv-executorch/bin/python; kiln is not imported).

    python et_cortex_m.py CALLS.pickle RESULTS.pickle

CALLS.pickle: a list of (operator, arguments): "quantized_conv2d" and the functional
variant's arguments, numpy arrays for tensors. RESULTS.pickle: each call's result as a
contiguous numpy array, in order, or the message of the
NotImplementedError it raised (its int32 convolution through PyTorch has no dilated form).
"""

import pickle
import sys


def main(calls_path: str, results_path: str) -> None:
    import executorch.backends.cortex_m.passes  # noqa: F401  (imports and registers the operators)
    import numpy as np
    import torch

    def torch_of(a):
        return torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a

    with open(calls_path, "rb") as f:
        calls = pickle.load(f)
    results = []
    for name, args in calls:
        try:
            out = getattr(torch.ops.cortex_m, name).default(*map(torch_of, args))
        except NotImplementedError as error:
            results.append(str(error))
            continue
        results.append(out.contiguous().numpy())
    with open(results_path, "wb") as f:
        pickle.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
