"""Executed schedule: replay sampled steps of an allocation log through a whole decoder forward.

`python -m kernels.execute LOG --device cuda` runs each sampled step at the model's real shapes
and dtype (random weights), on the logged block tables and slots, with the paged kernels of
kernels/, and times it under CUDA graphs and eagerly, per part (attention, linear, other).
benchmarks/calibrate.py runs synthetic grids through the same executor. Formats and method:
kernels/execute/README.md.
"""
from __future__ import annotations
