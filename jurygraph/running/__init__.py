"""Running: datasets into items, and the runner that drives a compiled graph over them durably."""
