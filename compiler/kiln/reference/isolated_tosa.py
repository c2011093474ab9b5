"""What `kiln run-host` runs in a kiln.isolation child for a delegate with a TOSA graph. The
isolation server imports this module, and forks each child from that process: it imports numpy
and tosa_reference_model and nothing more (torch least of all)."""

from __future__ import annotations

import numpy as np
import tosa_reference_model


def tosa_graph(graph: bytes, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], bool, str]:
    """(outputs, whether tosa_reference_model found the graph valid, its status) of the TOSA
    flatbuffer `graph` run on `inputs`."""
    results, status = tosa_reference_model.run(graph, inputs)
    return [np.asarray(r) for r in results], status == tosa_reference_model.GraphStatus.TOSA_VALID, str(status)
