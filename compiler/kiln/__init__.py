"""kiln: PyTorch models baked into bare-metal Cortex-M + Ethos-U firmware."""
