"""The subscripts of ``einsum``, read as NumPy reads them: one label list per operand
and one for the result.

A label is a letter, or ``"..k"`` for the k-th axis from the right that an ellipsis
stands for (broadcast right-aligned, as NumPy's ``...``). Without ``->`` the result is
the ellipsis axes, then the letters that occur once, in ASCII order (NumPy's implicit
mode). Checks and messages are NumPy's; the plan of the contraction is
``linear_algebra.einsum``'s.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from string import ascii_letters, ascii_lowercase, ascii_uppercase

ELLIPSIS = "..."
_SUBLIST_LETTERS = ascii_uppercase + ascii_lowercase  # NumPy's: 0..25 'A'..'Z', 26..51 'a'..'z'


@dataclass(frozen=True)
class Spec:
    inputs: tuple  # per operand: its labels, one per axis
    output: tuple  # the result's labels, one per axis


def _ellipsis_labels(n: int) -> list[str]:
    return [f"..{k}" for k in range(n - 1, -1, -1)]


def _term_labels(term: str, ndim: int, which: str) -> list[str]:
    """Labels of one operand's term (or the output's, ``ndim`` None: no check)."""
    if term.count(ELLIPSIS) > 1 or "." in term.replace(ELLIPSIS, ""):
        raise ValueError(f"einstein sum subscripts string contains a '.' that is not part of "
                         f"an ellipsis ('...') in {which}")
    head, _, tail = term.partition(ELLIPSIS)
    for c in head + tail:
        if c not in ascii_letters:
            raise ValueError(f"invalid subscript {c!r} in einstein sum subscripts string, "
                             "subscripts must be letters")
    letters = len(head) + len(tail)
    if ELLIPSIS not in term:
        if ndim is not None and letters != ndim:
            raise ValueError(f"einsum: {which} has {ndim} dimensions but {letters} subscripts "
                             f"{term!r} (and no '...' for the others)")
        return list(term)
    if ndim is None:
        return list(head) + [ELLIPSIS] + list(tail)
    if letters > ndim:
        raise ValueError(f"einsum: {which} has {ndim} dimensions but {letters} subscripts {term!r}")
    return list(head) + _ellipsis_labels(ndim - letters) + list(tail)


def parse(subscripts: str, ndims: list[int]) -> Spec:
    """The labels of ``subscripts`` (NumPy's string form) for operands of ``ndims``."""
    if not isinstance(subscripts, str):
        raise TypeError(f"einsum: subscripts must be a string, not {type(subscripts).__name__}")
    s = subscripts.replace(" ", "")
    lhs, arrow, rhs = s.partition("->")
    if "->" in rhs or "-" in lhs or ">" in lhs:
        raise ValueError(f"einsum: subscripts {subscripts!r} have a stray '-' or '>' (one '->' at most)")
    terms = lhs.split(",")
    if len(terms) != len(ndims):
        raise ValueError(f"einsum: subscripts {subscripts!r} name {len(terms)} operands, "
                         f"{len(ndims)} were given")
    inputs = [_term_labels(t, n, f"operand {i}") for i, (t, n) in enumerate(zip(terms, ndims))]
    n_ellipsis = max((sum(lab.startswith("..") for lab in labels) for labels in inputs), default=0)
    if not arrow:
        counts: dict = {}
        for labels in inputs:
            for lab in labels:
                counts[lab] = counts.get(lab, 0) + 1
        once = sorted(lab for lab, n in counts.items() if n == 1 and not lab.startswith(".."))
        return Spec(tuple(map(tuple, inputs)), tuple(_ellipsis_labels(n_ellipsis) + once))
    out = _term_labels(rhs, None, "the output")
    if ELLIPSIS in out:
        i = out.index(ELLIPSIS)
        out[i:i + 1] = _ellipsis_labels(n_ellipsis)
    elif n_ellipsis:
        raise ValueError("output has more dimensions than subscripts given in einstein sum, but "
                         "no '...' ellipsis provided to broadcast the extra dimensions.")
    seen = set()
    everywhere = {lab for labels in inputs for lab in labels}
    for lab in out:
        if lab in seen:
            raise ValueError(f"einstein sum subscripts string includes output subscript {lab!r} "
                             "multiple times")
        if lab not in everywhere:
            raise ValueError(f"einstein sum subscripts string included output subscript {lab!r} "
                             "which never appeared in an input")
        seen.add(lab)
    return Spec(tuple(map(tuple, inputs)), tuple(out))


def from_sublists(args) -> tuple[str, list]:
    """NumPy's other form, ``einsum(op0, sublist0, op1, sublist1, ..., [sublistout])``
    (integers 0..51 and ``Ellipsis``), as a subscripts string and the operands."""
    if len(args) % 2:
        operands, lists, out = list(args[0:-1:2]), list(args[1:-1:2]), args[-1]
    else:
        operands, lists, out = list(args[0::2]), list(args[1::2]), None

    def term(sub) -> str:
        chars = []
        for v in sub:
            if v is Ellipsis:
                chars.append(ELLIPSIS)
                continue
            k = operator.index(v)
            if not 0 <= k < len(_SUBLIST_LETTERS):
                raise ValueError(f"einsum: subscript {k} is not in [0, {len(_SUBLIST_LETTERS)})")
            chars.append(_SUBLIST_LETTERS[k])
        return "".join(chars)

    subscripts = ",".join(term(sub) for sub in lists)
    if out is not None:
        subscripts += "->" + term(out)
    return subscripts, operands
