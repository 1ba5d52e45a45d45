"""The machinery under ``dgvm.array``'s functions (see ``dgvm/array/__init__.py``)."""
