"""``x.real`` and ``x.imag`` as NumPy gives them: views of ``x``'s memory.

Of a complex array, each part is a writable view: a write to it changes that part of
``x`` and keeps the other. Of a real array, ``x.real`` is ``x`` itself and ``x.imag`` a
read-only view of zeros.
"""

from __future__ import annotations

from dgvm.array._engine.aliases import derived, stand_in
from dgvm.array._engine.apply import apply


def part(x, name: str):
    """``x.real`` (``name="real"``) or ``x.imag``."""
    if x.dtype.kind != "c":
        if name == "real":
            return x
        return derived(x, lambda s: apply("imag", s), readonly=True, layout=stand_in(x))

    def write_back(source, values):
        other = apply("imag" if name == "real" else "real", source)
        re, im = (values, other) if name == "real" else (other, values)
        source[...] = apply("add", re, apply("multiply", im, 1j))

    layout = getattr(stand_in(x), name)
    return derived(x, lambda s: apply(name, s), write_back, layout=layout)
