"""``dgvm.array``: n-d arrays in global device memory (``import dgvm.array as dnp``).

This step gives the data model (``DArray``) and creation/round-trip functions; the
NumPy-like operations follow the Python array API standard in a later step.
"""

from dgvm.array.creation import asnumpy, empty, from_numpy, zeros
from dgvm.array.darray import DArray

__all__ = ["DArray", "asnumpy", "empty", "from_numpy", "zeros"]
