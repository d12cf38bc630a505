"""pagedsim: sim."""
