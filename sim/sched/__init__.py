"""How steps are formed: vLLM v1's scheduler over any KV manager.

Admission, preemption and sampling (fork, beams) are parts of one scheduler; the fast path
(steady decodes, running-total snapshots) is a helper object it owns.
"""
