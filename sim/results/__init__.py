"""What a run records and writes: step and request rows, the summary, the allocation log,
the comparison table and the results schema (``results_schema.json``) that readers use
without importing ``sim``.
"""
