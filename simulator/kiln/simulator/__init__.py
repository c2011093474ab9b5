"""kiln's virtual platform: QEMU host glue (and, later, the Ethos-U model)."""
