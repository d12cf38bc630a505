"""Many runs from one spec: the sweep grid, its cells, backends (process pool, Ray), the
on-disk store, the merged table and the capacity search.
"""
