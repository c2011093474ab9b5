"""kiln's model zoo."""
