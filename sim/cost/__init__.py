"""What serving costs: model and GPU presets, KV capacity, step-time models, swap time.

Nothing here knows about requests or schedulers: given a model, a GPU and a batch, it says
how many KV blocks fit and how long a step or a PCIe swap takes.
"""
