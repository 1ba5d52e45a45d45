"""Kernels where the data lives: ``dgvm.kernel``, ``dgvm.launch``, ``dgvm.vectorize``."""
