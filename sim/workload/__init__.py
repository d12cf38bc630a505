"""What is served: trace rows turned into request groups and sequences with token ids.

Includes the request object the allocator sees over a known token array and the fast,
vectorised prefix-block hasher.
"""
