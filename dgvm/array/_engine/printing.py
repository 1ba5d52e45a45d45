"""``print(x)``, ``str``, ``repr`` and ``format`` of a DArray: NumPy's text, from the
elements shown only.

A large array is summarized as NumPy summarizes it (more than ``threshold`` elements:
``edgeitems`` at each end of each axis, ``...`` between). Only those corner elements are
read, through views (``small_reads`` reads them from the chunks in place), so printing a
100 GB array reads a few hundred bytes. The elements are formatted by NumPy itself, all
together (its width and precision come from the elements it shows, as NumPy's do), and
laid out by NumPy's rules (``numpy.get_printoptions``: ``linewidth``, ``threshold``,
``edgeitems``).
"""

from __future__ import annotations

import itertools

import numpy as np

# The dtypes NumPy's repr leaves implied (``array([1., 2.])``: float64).
_IMPLIED = {np.dtype(t) for t in (np.float64, np.int_, np.complex128, np.bool_)}
_SEP = "\x1f"  # splits NumPy's formatted elements apart (no number contains it)


def array_str(x) -> str:
    """``str(x)``: as NumPy's ``str`` of the same values."""
    if x.size == 0:
        return str(np.empty(x.shape, x.dtype))
    corners, summarized = _corners(x)
    if x.ndim == 0:
        return str(corners)
    return _render(x.shape, corners, summarized, " ", "")


def array_repr(x) -> str:
    """``repr(x)``: as NumPy's ``repr`` of the same values (``array(...)``, as CuPy's)."""
    if x.size == 0:
        return repr(np.empty(x.shape, x.dtype))
    corners, summarized = _corners(x)
    if x.ndim == 0:
        return repr(corners)
    prefix = "array("
    body = _render(x.shape, corners, summarized, ", ", prefix)
    extras = []
    if summarized:
        extras.append(f"shape={x.shape}")
    if x.dtype not in _IMPLIED:
        extras.append(f"dtype={x.dtype}")
    if not extras:
        return prefix + body + ")"
    text = prefix + body + ","
    extra = ", ".join(extras) + ")"
    last_line = len(text) - (text.rfind("\n") + 1)
    spacer = "\n" + " " * len(prefix) if last_line + len(extra) + 1 > np.get_printoptions()["linewidth"] else " "
    return text + spacer + extra


def array_format(x, spec: str) -> str:
    """``format(x, spec)``: a 0-d array formats as its number; others take no spec (NumPy's rule)."""
    if x.ndim == 0:
        return format(x.to_numpy()[()], spec)
    if spec:
        raise TypeError(f"unsupported format string {spec!r} passed to a {x.ndim}-d DArray "
                        "(NumPy formats only 0-d arrays with a spec)")
    return array_str(x)


def _corners(x):
    """(the elements NumPy shows, as one small NumPy array; whether it summarizes)."""
    options = np.get_printoptions()
    edge = options["edgeitems"]
    if x.size <= options["threshold"]:
        return x.to_numpy(), False
    # Per axis, its leading and trailing ``edge`` elements where it is longer than 2 edge.
    parts = [((slice(0, edge), slice(n - edge, n)) if n > 2 * edge else (slice(None),)) for n in x.shape]
    choices = [range(len(p)) for p in parts]  # (slices are not hashable before Python 3.12)
    blocks = {c: x[tuple(p[i] for p, i in zip(parts, c))].to_numpy() for c in itertools.product(*choices)}

    def assemble(prefix):
        axis = len(prefix)
        if axis == x.ndim:
            return blocks[prefix]
        return np.concatenate([assemble(prefix + (i,)) for i in choices[axis]], axis=axis)

    return assemble(()), True


def _words(corners: np.ndarray) -> np.ndarray:
    """NumPy's text of each element, formatted together (same widths as NumPy's)."""
    flat = corners.reshape(-1)
    text = np.array2string(flat, separator=_SEP, threshold=flat.size + 1, max_line_width=2**31)
    words = [w.strip("\n") for w in text[1:-1].split(_SEP)]
    return np.array(words, dtype=object).reshape(corners.shape)


def _render(shape, corners, summarized: bool, separator: str, prefix: str) -> str:
    """NumPy's layout (``numpy._core.arrayprint._formatArray``, non-legacy) of an array of
    ``shape`` whose shown elements are ``corners``."""
    words = _words(corners)
    options = np.get_printoptions()
    edge = options["edgeitems"]

    def word(index):
        # index into the full shape -> into the corners (negative indices count from the end)
        return words[tuple(i if i >= 0 else words.shape[a] + i for a, i in enumerate(index))]

    def recurse(index, hanging, width):
        axis = len(index)
        left = len(shape) - axis
        if left == 0:
            return word(index)
        n = shape[axis]
        summary = summarized and 2 * edge < n
        leading, trailing = (edge, edge) if summary else (0, n)
        inner_hanging, inner_width = hanging + " ", width - 1
        if left == 1:
            elem_width = width - max(len(separator.rstrip()), 1)
            s, line = "", hanging
            for i in range(leading):
                s, line = _extend(s, line, recurse(index + (i,), inner_hanging, inner_width), elem_width, hanging)
                line += separator
            if summary:
                s, line = _extend(s, line, "...", elem_width, hanging)
                line += separator
            for i in range(trailing, 1, -1):
                s, line = _extend(s, line, recurse(index + (-i,), inner_hanging, inner_width), elem_width, hanging)
                line += separator
            s, line = _extend(s, line, recurse(index + (-1,), inner_hanging, inner_width), elem_width, hanging)
            s += line
        else:
            s = ""
            line_sep = separator.rstrip() + "\n" * (left - 1)
            for i in range(leading):
                s += hanging + recurse(index + (i,), inner_hanging, inner_width) + line_sep
            if summary:
                s += hanging + "..." + line_sep
            for i in range(trailing, 1, -1):
                s += hanging + recurse(index + (-i,), inner_hanging, inner_width) + line_sep
            s += hanging + recurse(index + (-1,), inner_hanging, inner_width)
        return "[" + s[len(hanging):] + "]"

    return recurse((), " " + " " * len(prefix), options["linewidth"])


def _extend(s: str, line: str, word: str, width: int, hanging: str):
    """Add ``word`` to ``line``, wrapping to a new line (``hanging``) where it would pass
    ``width`` and wrapping helps (NumPy's ``_extendLine``)."""
    if len(line) + len(word) > width and len(line) > len(hanging):
        s += line.rstrip() + "\n"
        line = hanging
    return s, line + word
