"""NumPy programs written as a scientist writes them, run unchanged under NumPy and under
``dgvm.array`` by ``tests/test_programs.py``: each module's ``inputs(rng)`` makes the host
data, and ``run(np, data)`` is the program, given the namespace as ``np``; it prints what
a scientist would look at and returns its result arrays."""
