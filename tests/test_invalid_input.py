"""Invalid arguments at dgvm's edges: the public API and every RPC handler, called raw.

Hypothesis draws, per function or handler, calls with one argument wrong (the wrong type,
out of range, NaN, inf, a bool, a string, an array, None, a missing or unknown keyword),
the others valid. Each must be refused with an allowed error whose message names the
argument: a ``dgvm`` error, or ``TypeError``/``ValueError`` (``IndexError``/``AxisError``
where NumPy raises them); over RPC, a refusal decoded into a ``dgvm`` error
(``messages.REFUSALS``). Never a raw ``KeyError``/``OverflowError``/``AttributeError``,
a comparison ``TypeError``, an array's truth-value error, a stall, or silent acceptance.
After the calls no allocation is left (the ``case`` fixture) and the cluster still works.

The draws are seeded (``derandomize``, or ``DGVM_INVALID_SEED``); ``DGVM_INVALID_EXAMPLES``
sets how many per test (CI: the default), ``pytest -s`` prints the tally of calls tried,
and ``DGVM_INVALID_COLLECT=1`` lists every wrong answer instead of failing on the first.
"""

from __future__ import annotations

import collections
import math
import os
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import dgvm
import dgvm.array as dnp
from dgvm.client.session import call_scheduler
from dgvm.protocol import messages
from dgvm.protocol.errors import DgvmError

# Dask's threads use the random module while hypothesis draws: not the strategies' doing.
pytestmark = pytest.mark.filterwarnings("ignore:Do not use the `random` module:hypothesis.errors.HypothesisDeprecationWarning")
EXAMPLES = int(os.environ.get("DGVM_INVALID_EXAMPLES", "1000"))
SEED = os.environ.get("DGVM_INVALID_SEED")  # another seed than the fixed one of CI
SLOW = 5.0  # seconds: a refusal that takes longer is a stall
_SETTINGS = settings(
    max_examples=EXAMPLES, derandomize=SEED is None, deadline=None, database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)


def SETTINGS(test):  # noqa: N802  (a decorator, like hypothesis' own settings object)
    test = _SETTINGS(test)
    return test if SEED is None else seed(int(SEED))(test)
TALLY: collections.Counter = collections.Counter()
COLLECT = os.environ.get("DGVM_INVALID_COLLECT")  # list every wrong answer, failing none
FOUND: collections.Counter = collections.Counter()

NAN, INF = float("nan"), float("inf")
# Values msgpack carries (what can reach a handler over RPC); none is an integer.
WIRE_NOT_INT = [None, True, False, 1.5, NAN, INF, -INF, "7", "", b"7", [1], {"k": 1}]
# More that only a caller in the same process can pass.
NOT_INT = WIRE_NOT_INT + [np.array([1, 2]), np.float64(2.0), 1j, object(), np.nan]
HUGE = [2**63, 2**64, 2**200, -(2**63) - 1, -(2**200)]
NOT_BOOL = [None, 0, 1, 2, 1.0, NAN, "yes", "", b"1", [True], {"k": 1}]
NOT_STR = [None, True, 0, 7, 1.5, NAN, b"tcp", [1], {"k": 1}]


def ints(low=None, high=None):
    return st.integers(min_value=low, max_value=high)


def bad_int(low=0, high=None, wire=False):
    """Not an integer, or an integer outside ``[low, high]``."""
    out = st.sampled_from(WIRE_NOT_INT if wire else NOT_INT + HUGE)
    out |= ints(-(2**63) if wire else None, low - 1)
    if high is not None:
        out |= ints(high + 1, 2**63 - 1 if wire else None)
    if wire:
        out |= st.sampled_from([-(2**63), 2**64 - 1])
    return out


def bad_int_list(low=0, high=None, wire=False):
    """Not a list of integers, or one with an element out of ``[low, high]``."""
    elem = bad_int(low, high, wire)
    return (
        st.sampled_from([None, 3, 1.5, NAN, "abc", b"ab", {"k": 1}, True])
        | st.lists(elem, min_size=1, max_size=3)
        | st.tuples(ints(low, high if high is not None else low + 3), elem).map(list)
    )


def attempt(label: str, call, names, rpc: bool = False, like: Exception | None = None) -> str | None:
    """Run ``call``; None if it was refused as it must be, else what went wrong. An error
    of the type of ``like`` (NumPy's for the same call) need not name the argument."""
    names = (names,) if isinstance(names, str) else tuple(names)
    t0 = time.monotonic()
    try:
        result = call()
    except Exception as e:  # noqa: BLE001  (classified below)
        took = time.monotonic() - t0
        text = str(e)
        kind = type(e).__name__
        if took > SLOW:
            verdict = f"stalled {took:.1f} s, then {kind}: {text[:200]}"
        elif rpc and not isinstance(e, DgvmError):
            verdict = f"raw {kind} over RPC: {text[:200]}"
        elif not isinstance(e, (DgvmError, TypeError, ValueError, IndexError)):
            verdict = f"raw {kind}: {text[:200]}"
        elif "not supported between instances" in text or "truth value of an" in text:
            verdict = f"internal {kind}: {text[:200]}"
        elif not any(n in text for n in names) and not (like is not None and isinstance(e, type(like))):
            verdict = f"{kind} not naming {names}: {text[:200]}"
        else:
            verdict = None
    else:
        verdict = f"accepted, answered {result!r:.120}"
        for close in ("free", "close"):  # (what a wrong acceptance made goes again)
            if callable(getattr(result, close, None)):
                getattr(result, close)()
    TALLY[(label.split("(")[0], "refused" if verdict is None else verdict.split(" ")[0])] += 1
    return verdict


def check(label, call, names, rpc=False):
    judged(label, attempt(label, call, names, rpc))


def judged(label, verdict):
    """Fail on a wrong answer (or, with ``DGVM_INVALID_COLLECT`` set, list it at the end)."""
    if verdict is not None and COLLECT:
        FOUND[f"{label}: {verdict}"] += 1
        return
    assert verdict is None, f"{label}: {verdict}"


@pytest.fixture(scope="module", autouse=True)
def tally():
    yield
    if TALLY:
        total = sum(TALLY.values())
        print(f"\ninvalid calls tried: {total}; not refused: "
              f"{sum(n for (_, v), n in TALLY.items() if v != 'refused')}")
        for (target, verdict), n in sorted(TALLY.items()):
            print(f"  {target:28s} {verdict:10s} {n}")
    for line in sorted(FOUND):
        print("FOUND", line)


def still_works(case):
    """After the invalid calls: a new buffer reads back what was written."""
    with dgvm.malloc(3000, chunk_bytes=1000, client=case.client) as buf:
        buf.write(500, np.arange(1000, dtype=np.uint8))
        np.testing.assert_array_equal(buf.read(500, 1000), np.arange(1000, dtype=np.uint8))


# -- the public API -------------------------------------------------------------------
def api_calls(buf, freed, client):
    """(label, call, names) makers per public function: each draws one invalid call."""
    n = buf.nbytes

    def malloc(d):
        which = d.draw(st.sampled_from(["nbytes", "chunk_bytes", "placement", "colocate"]))
        kw = dict(nbytes=4096, chunk_bytes=1024, placement=None, colocate=None)
        kw[which] = d.draw({
            # (a byte count may be a string: "7" and "4 KiB" are valid; None: the default chunk)
            "nbytes": bad_int(1).filter(lambda v: not isinstance(v, str) or v != "7") | st.sampled_from(["abc", "1.5.3", "-5 MiB", "nan"]),
            "chunk_bytes": bad_int(1).filter(lambda v: v is not None and (not isinstance(v, str) or v != "7")) | st.sampled_from(["abc", "-1 kB"]),
            "placement": st.sampled_from(["nope", "", 5, 1.5, b"packed", ["packed"], True]),
            "colocate": st.sampled_from([10**9, -1, 1.5, NAN, "abc", b"x", True, [1], (freed, [0]),
                                         (buf, [0, "a"]), (buf, NAN)]) | st.just(freed),
        }[which])
        return f"malloc({which}={kw[which]!r:.60})", lambda: dgvm.malloc(client=client, **kw), (which, "allocation")

    def write(d):
        if d.draw(st.booleans()):
            off = d.draw(bad_int(0, n - 1))
            return f"write(offset={off!r:.60})", lambda: buf.write(off, b"abc"), "offset"
        data = d.draw(st.sampled_from([None, 1.5, NAN, 7, "abc", [1, 2], {"k": 1}, object(),
                                       np.array([object()]), True]))
        return f"write(data={data!r:.60})", lambda: buf.write(0, data), "data"

    def read(d):
        if d.draw(st.booleans()):
            off = d.draw(bad_int(0, n - 1))
            return f"read(offset={off!r:.60})", lambda: buf.read(off, 1), "offset"
        nb = d.draw(bad_int(0, n))
        return f"read(nbytes={nb!r:.60})", lambda: buf.read(0, nb), "nbytes"

    def span(d):  # both in range, together past the end
        off = d.draw(ints(1, n - 1))
        return f"read(offset={off}, nbytes={n})", lambda: buf.read(off, n), ("offset", "nbytes")

    def freed_use(d):
        what = d.draw(st.sampled_from(["read", "write", "free", "chunks", "homes", "backends",
                                       "by_home", "home", "migrate", "refresh"]))
        call = {
            "read": lambda: freed.read(0, 1), "write": lambda: freed.write(0, b"a"),
            "free": freed.free, "chunks": lambda: freed.chunks, "homes": freed.homes,
            "backends": freed.backends, "by_home": freed.by_home, "home": lambda: freed.home(0),
            "migrate": lambda: freed.migrate([0], buf.home(0)), "refresh": freed.refresh,
        }[what]
        return f"freed buffer.{what}", call, "freed"

    def home(d):
        i = d.draw(bad_int(0, buf.nchunks - 1))
        return f"home(index={i!r:.60})", lambda: buf.home(i), "index"

    def by_home(d):
        idx = d.draw(bad_int_list(0, buf.nchunks - 1).filter(lambda v: v is not None))  # None: all
        return f"by_home(indices={idx!r:.60})", lambda: buf.by_home(idx), "indices"

    def migrate(d):
        if d.draw(st.booleans()):
            idx = d.draw(bad_int_list(0, buf.nchunks - 1))
            return f"migrate(indices={idx!r:.60})", lambda: buf.migrate(idx, buf.home(0)), "indices"
        w = d.draw(st.sampled_from(NOT_STR + ["tcp://nowhere:1", ""]))
        return f"migrate(worker={w!r:.60})", lambda: buf.migrate([0], w), "worker"

    def translate(d):
        v = d.draw(bad_int(0) | st.sampled_from([0, buf.vaddr - 1, buf.vaddr + n, 2**62]))
        return f"translate(vaddr={v!r:.60})", lambda: dgvm.translate(v, client=client), ("vaddr", "address")

    def translate_many(d):
        vs = d.draw(bad_int_list(0) | st.sampled_from([
            "abc", np.array([1.5]), np.array([[buf.vaddr]]), np.array([-1]),
            np.array([2**64 - 1], dtype=np.uint64), [buf.vaddr, buf.vaddr + n]]))
        return f"translate_many(vaddrs={vs!r:.60})", lambda: dgvm.translate_many(vs, client=client), \
            ("vaddrs", "address")

    def table(d):
        if d.draw(st.booleans()):
            a = d.draw(bad_int(1).filter(lambda v: v is not None) | st.sampled_from([10**9, freed.alloc_id]))
            return f"table(alloc_id={a!r:.60})", lambda: dgvm.table(a, client=client), ("alloc_id", "allocation")
        c = d.draw(st.sampled_from(NOT_BOOL))
        return f"table(chunks={c!r:.60})", lambda: dgvm.table(chunks=c, client=client), "chunks"

    def workers(d):
        v = d.draw(st.sampled_from(NOT_BOOL + [np.array([True, False])]))
        return f"workers(include_lost={v!r:.60})", lambda: dgvm.workers(v, client=client), "include_lost"

    def client_arg(d):
        fn = d.draw(st.sampled_from(["stats", "rebalance", "workers", "table", "translate_many",
                                     "malloc"]))
        c = d.draw(st.sampled_from(["tcp://x:1", 5, NAN, [1], object()]))
        call = {
            "stats": lambda: dgvm.stats(client=c), "rebalance": lambda: dgvm.rebalance(client=c),
            "workers": lambda: dgvm.workers(client=c), "table": lambda: dgvm.table(client=c),
            "translate_many": lambda: dgvm.translate_many([buf.vaddr], client=c),
            "malloc": lambda: dgvm.malloc(10, client=c),
        }[fn]
        return f"{fn}(client={c!r:.40})", call, "client"

    def connect(d):
        if d.draw(st.booleans()):
            a = d.draw(st.sampled_from([5, 1.5, NAN, b"tcp://x:1", ["tcp://x:1"], True, object()]))
            return f"connect(address={a!r:.60})", lambda: dgvm.connect(a), "address"
        a = client.scheduler.address
        return "connect(address, n_workers=2)", lambda: dgvm.connect(a, n_workers=2), "n_workers"

    return [malloc, write, read, span, freed_use, home, by_home, migrate, translate,
            translate_many, table, workers, client_arg, connect]


def test_public_api_refuses_invalid_arguments(case):
    buf = dgvm.malloc(4096, chunk_bytes=1024, client=case.client)
    freed = dgvm.malloc(100, client=case.client)
    freed.free()
    calls = api_calls(buf, freed, case.client)
    try:
        @SETTINGS
        @given(st.data())
        def run(data):
            make = data.draw(st.sampled_from(calls))
            check(*make(data))

        run()
    finally:
        buf.free()
    still_works(case)


# -- dgvm.array creation and kernels ----------------------------------------------------
BAD_SHAPES = [-1, (2, -1), 1.5, NAN, "abc", (2, "3"), [[1, 2]], (2, 1.5), 2**63, (2**40, 2**40), 1j,
              np.array([[2]]), {"k": 1}, object()]
BAD_DTYPES = ["nope", "O", object, 5, NAN, "V0", "f16x", b"f8", [("a", "f8")], "U"]
BAD_CHUNKS = [0, (0,), 1.5, NAN, "abc", (3, 3), ((3, 3, 3, 3),), -2, True, (1.5,), object(),
              [[4, 6], [1]], {"k": 1}]


def numpy_error(fn, *args, **kwargs):
    """The exception NumPy's ``fn`` raises for these arguments, or None."""
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        return e
    return None


def creation_calls(client):
    def shape(d):
        fn = d.draw(st.sampled_from(["zeros", "ones", "empty", "full"]))
        s = d.draw(st.sampled_from(BAD_SHAPES))
        args = (s, 2.0) if fn == "full" else (s,)
        return f"{fn}(shape={s!r:.60})", (getattr(np, fn), getattr(dnp, fn), args, {}), "shape"

    def dtype(d):
        fn = d.draw(st.sampled_from(["zeros", "ones", "empty", "full", "arange"]))
        t = d.draw(st.sampled_from(BAD_DTYPES))
        args = (10, 2.0) if fn == "full" else (10,)
        return f"{fn}(dtype={t!r:.60})", (getattr(np, fn), getattr(dnp, fn), args, {"dtype": t}), "dtype"

    def chunks(d):
        fn = d.draw(st.sampled_from(["zeros", "ones", "empty", "arange", "linspace"]))
        c = d.draw(st.sampled_from(BAD_CHUNKS))
        args = {"linspace": (0, 1, 10)}.get(fn, (10,))
        return f"{fn}(chunks={c!r:.60})", (None, getattr(dnp, fn), args, {"chunks": c}), "chunks"

    def ranges(d):
        which = d.draw(st.sampled_from(["arange", "linspace", "eye", "full"]))
        v = d.draw(st.sampled_from([NAN, INF, -1, "abc", None, 1j, [1, 2], 2**70]))
        args, name = {
            "arange": ((v,), "start"), "linspace": ((0, 1, v), "num"), "eye": ((v,), "n_rows"),
            "full": ((3, v), "fill_value"),
        }[which]
        return f"{which}({name}={v!r:.60})", (getattr(np, which), getattr(dnp, which), args, {}), \
            (name, "stop", "N", "M", "num", "start", "fill_value", "n_rows", "could not convert")

    return [shape, dtype, chunks, ranges]


def test_array_creation_refuses_what_numpy_refuses(case):
    calls = creation_calls(case.client)

    @SETTINGS
    @given(st.data())
    def run(data):
        label, (np_fn, fn, args, kwargs), names = data.draw(st.sampled_from(calls))(data)
        if np_fn is not None:
            expected = numpy_error(np_fn, *args, **{k: v for k, v in kwargs.items() if k != "chunks"})
            if expected is None:  # NumPy takes it: not an invalid call
                return
        judged(label, attempt(label, lambda: fn(*args, **kwargs), names,
                              like=expected if np_fn is not None else None))

    run()
    still_works(case)


@dgvm.kernel
def copy_kernel(x, out):
    out[0] = x[0]


def test_kernels_refuse_invalid_arguments(case):
    x = dnp.zeros(8, chunks=4)
    other = dnp.zeros(6, chunks=3)
    try:
        @SETTINGS
        @given(st.data())
        def run(data):
            which = data.draw(st.sampled_from(["kernel", "out", "halo", "threads", "args", "wait",
                                               "blocks", "select", "decorate"]))
            v = data.draw(st.sampled_from([None, 5, NAN, -1, "abc", 1.5, [1], np.zeros(3), True, (0, 1)]))
            call = {
                "kernel": lambda: dgvm.launch(v, x, out=x),
                "out": lambda: dgvm.launch(copy_kernel, x, out=v),
                "halo": lambda: dgvm.launch(copy_kernel, x, out=x, halo=v),
                "threads": lambda: dgvm.launch(copy_kernel, x, out=x, threads_per_block=v),
                "args": lambda: dgvm.launch(copy_kernel, other, out=x),
                "wait": lambda: dgvm.wait(v),
                "blocks": lambda: dgvm.blocks(v, lambda b: b),
                "select": lambda: dgvm.blocks(x, v),
                "decorate": lambda: dgvm.kernel(v),
            }[which]
            names = {"threads": "threads_per_block", "args": "argument", "wait": "wait",
                     "blocks": "DArray", "decorate": "kernel"}.get(which, which)
            if which in ("threads", "halo") and (v is None and which == "threads"
                                                 or type(v) in (int, list) and v in (5, [1])):
                return  # valid values
            check(f"launch({which}={v!r:.40})", call, names)

        run()
    finally:
        x.free()
        other.free()
    still_works(case)


# -- the handlers, called raw over RPC --------------------------------------------------
def mutate(d, template: dict, bad: dict):
    """A call of ``template`` with one argument wrong (from ``bad``), missing (when
    required) or an unknown one added: (kwargs, the name the refusal must give)."""
    how = d.draw(st.sampled_from(["bad"] * 6 + ["missing", "unknown"]))
    kw = dict(template)
    if how == "unknown" or not bad:
        kw["bogus"] = 1
        return kw, "bogus"
    name = d.draw(st.sampled_from(sorted(bad)))
    if how == "missing" and name in template.get("__required__", ()):
        del kw[name]
    else:
        kw[name] = d.draw(bad[name])
    return kw, name


def scheduler_requests(buf, client, worker):
    """Per scheduler handler: (valid arguments, {argument: strategy of invalid values})."""
    wid = lambda: bad_int(1, wire=True)  # noqa: E731
    chunk = lambda: bad_int(0, buf.nchunks - 1, wire=True)  # noqa: E731
    wstr = st.sampled_from(NOT_STR)
    wbool = st.sampled_from(NOT_BOOL)
    owner = client.id
    return {
        messages.ALLOCATE: (
            dict(owner=owner, nbytes=4096, chunk_bytes=1024, __required__=("owner",)),
            dict(owner=wstr, nbytes=bad_int(1, wire=True), chunk_bytes=bad_int(1, wire=True),
                 placement=st.sampled_from(["nope", 5, None, ""]), zero=wbool, replicas=bad_int(1, wire=True),
                 colocate=st.sampled_from(["a", 1.5, NAN, [1], [1, "a"], [buf.alloc_id, [NAN]], True])),
        ),
        "allocate-grid": (
            dict(owner=owner, shape=[8, 8], dtype="float64", chunks=[[4, 4], [8]]),
            dict(shape=st.sampled_from([[-1, 8], [8], "ab", 5, [8, NAN], [8, 2**63 - 1], [True, 8]]),
                 dtype=st.sampled_from(["nope", "O", 5, None, "V0", [1]]),
                 chunks=st.sampled_from([[[4, 4]], [[4, 4], [9]], [[0, 8], [8]], [[4, 4], [8.0]],
                                         "auto", 5, [[4, 4], ["8"]], [[-4, 12], [8]]])),
        ),
        messages.FREE: (dict(alloc_id=buf.alloc_id, owner=owner, __required__=("alloc_id",)),
                        dict(alloc_id=wid(), owner=st.sampled_from([5, 1.5, [owner], b"x", ""]))),
        messages.FREE_ALL: ({}, {}),
        messages.TRANSLATE: (dict(vaddrs=[buf.vaddr], __required__=("vaddrs",)),
                             dict(vaddrs=bad_int_list(0, wire=True))),
        messages.TABLE: ({}, dict(alloc_id=wid().filter(lambda v: v is not None), chunks=wbool)),
        messages.WORKERS: ({}, dict(include_lost=wbool)),
        messages.CHUNK_MAP: (dict(alloc_id=buf.alloc_id, __required__=("alloc_id",)), dict(alloc_id=wid())),
        messages.LOCATE: (dict(alloc_id=buf.alloc_id, index=0, worker=worker,
                               __required__=("alloc_id", "index", "worker")),
                          dict(alloc_id=wid(), index=chunk(), worker=wstr)),
        messages.REPLICA_ADDED: (
            dict(alloc_id=buf.alloc_id, index=0, worker=worker, nbytes=1024, path="comm", seconds=0.1,
                 source=worker, version=0,
                 __required__=("alloc_id", "index", "worker", "nbytes", "path", "seconds", "source", "version")),
            dict(alloc_id=bad_int(0, wire=True), index=chunk(), worker=wstr, nbytes=bad_int(1, wire=True),
                 path=st.sampled_from([5, None, "nope"]), seconds=st.sampled_from([NAN, -1.0, INF, "a", None]),
                 source=wstr, version=bad_int(0, wire=True)),
        ),
        messages.LAUNCHED: (
            dict(alloc_id=buf.alloc_id, wrote=[], reads={}, __required__=("alloc_id", "wrote", "reads")),
            dict(alloc_id=bad_int(0, wire=True), wrote=bad_int_list(0, buf.nchunks - 1, wire=True), worker=st.sampled_from([5, b"x", [1]]),
                 reads=st.sampled_from([[], "ab", {"x": {}}, {buf.alloc_id: {}}, {buf.alloc_id: 5},
                                        {buf.alloc_id: {"hits": NAN, "misses": 0, "home": [], "remote": []}},
                                        {buf.alloc_id: {"hits": 0, "misses": 0, "home": [99], "remote": []}}])),
        ),
        messages.STATS: ({}, {}),
        messages.RELEASES_SENT: (dict(worker=worker, __required__=("worker",)), dict(worker=wstr)),
        messages.MIGRATE: (
            dict(alloc_id=buf.alloc_id, indices=[0], worker=worker, owner=owner,
                 __required__=("alloc_id", "indices", "worker")),
            dict(alloc_id=wid(), indices=bad_int_list(0, buf.nchunks - 1, wire=True), worker=wstr,
                 owner=st.sampled_from([5, [owner], ""])),
        ),
        messages.REBALANCE: ({}, dict(owner=st.sampled_from([5, 1.5, [owner], b"x", "", True]))),
        messages.SET_REPLICAS: (
            dict(alloc_id=buf.alloc_id, replicas=1, owner=owner, __required__=("alloc_id", "replicas")),
            dict(alloc_id=wid(), replicas=bad_int(1, wire=True), owner=st.sampled_from([5, [owner], ""])),
        ),
        messages.CONTEXT_LOST: (
            dict(worker=worker, key="dgvm-no-such-task", error="a test", __required__=("worker", "key", "error")),
            dict(worker=wstr, key=st.sampled_from([5, None, [1], b"x"]), error=st.sampled_from([5, None, [1]])),
        ),
        messages.STRANDED: (  # (a worker that is not there: answered at once)
            dict(worker="tcp://127.0.0.1:1", tasks=[{"key": "dgvm-x", "allocations": [], "rerun": ""}],
                 __required__=("worker", "tasks")),
            dict(worker=st.sampled_from([5, None, [1], b"x"]),
                 tasks=st.sampled_from([5, "ab", [5], [{"key": 5}], [{"key": "k", "allocations": "x"}],
                                        [{"key": "k", "rerun": "sometimes"}], [{}]]),
                 sent=st.sampled_from([5, "x", [True]])),
        ),
        messages.REPLICAS_DROPPED: (
            dict(worker=worker, dropped={}, __required__=("worker", "dropped")),
            dict(worker=wstr, dropped=st.sampled_from([[], "ab", 5, {"x": [0]}, {buf.alloc_id: 5},
                                                       {buf.alloc_id: ["a"]}, {buf.alloc_id: [NAN]}])),
        ),
    }


def worker_requests(buf, client, worker):
    """Per worker handler: (valid arguments, {argument: strategy of invalid values}),
    all about ``worker``, which holds chunk 0 of ``buf``."""
    owner = client.id
    nobody = 10**9  # an allocation id the GVAT never gave
    wid = lambda: bad_int(0, wire=True)  # noqa: E731
    wstr = st.sampled_from(NOT_STR)
    # (None: no release to wait for; 10**6: never sent to this worker)
    ticket = st.sampled_from([v for v in WIRE_NOT_INT if v is not None] + [-1, 10**6])
    pieces_bad = st.sampled_from([
        "ab", 5, [[0]], [[0, 0]], [["a", 0, b"x"]], [[0, NAN, b"x"]], [[0, -1, b"x"]], [[0, 2**62, b"x"]],
        [[NAN, 0, b"x"]], [[0, 0, 5]], [[0, 0, None]], [[0, 0, "abc"]], [5], [[0, True, b"x"]],
    ])
    read_bad = st.sampled_from([
        "ab", 5, [[0]], [["a", 0, 1]], [[0, NAN, 1]], [[0, 0, -1]], [[0, 0, NAN]], [[0, 2**62, 1]],
        [[0, 0, 2**62]], [[0, 0, "1"]], [5], [[0, 0, True]],
    ])
    # (rows of chunk 0 of an allocation no task reads here: kept, never taken)
    piece = {"alloc_id": nobody, "index": 0, "span": [0, 8], "key": "k", "source": worker,
             "desc": {"data": b"\0" * 8, "nbytes": 256, "start": 0, "writes": 1}}
    good_meta = {"vaddr": 2**32, "nbytes": 256, "nchunks": 1, "chunk_bytes": 256, "placement": "balanced",
                 "created": 0.0}
    bad_meta = st.sampled_from([5, "ab", [1], {"vaddr": 1}, {**good_meta, "vaddr": "a"},
                                {**good_meta, "nbytes": -1}, {**good_meta, "dtype": "nope"},
                                {**good_meta, "shape": ["a"]}, {**good_meta, "grid_chunks": [[0]]},
                                {**good_meta, "created": NAN}])
    return {
        messages.STORE_ALLOCATE: (
            dict(alloc_id=nobody, owner=owner, indices=[0], sizes=[256],
                 __required__=("alloc_id", "owner", "indices", "sizes")),
            dict(alloc_id=wid(), owner=wstr, indices=bad_int_list(0, wire=True),
                 sizes=bad_int_list(1, wire=True) | st.just([256, 256]), zero=st.sampled_from(NOT_BOOL),
                 after_release=ticket, meta=bad_meta),
        ),
        messages.STORE_FREE: (dict(alloc_id=nobody, __required__=("alloc_id",)), dict(alloc_id=wid())),
        messages.WRITE: (dict(alloc_id=buf.alloc_id, owner=owner, pieces=[[0, 0, b"x"]],
                              __required__=("alloc_id", "owner", "pieces")),
                         dict(alloc_id=wid(), owner=wstr, pieces=pieces_bad, key=st.sampled_from([5, [1], b"x"]))),
        messages.READ: (dict(alloc_id=buf.alloc_id, owner=owner, pieces=[[0, 0, 1]],
                             __required__=("alloc_id", "owner", "pieces")),
                        dict(alloc_id=wid(), owner=wstr, pieces=read_bad)),
        messages.STORE_INFO: ({}, dict(after_release=ticket)),
        messages.PUSHED: (dict(pieces=[piece], __required__=("pieces",)), dict(pieces=st.sampled_from([
            "ab", 5, [5], [{"alloc_id": 1}], [{**piece, "span": [3, 1]}], [{**piece, "span": [0]}],
            [{**piece, "alloc_id": "a"}], [{**piece, "index": -1}], [{**piece, "key": 5}], [{**piece, "desc": 5}],
        ]))),
        messages.EXPORT: (
            dict(alloc_id=buf.alloc_id, indices=[0], path="comm", __required__=("alloc_id", "indices", "path")),
            dict(alloc_id=wid(), indices=bad_int_list(0, wire=True), path=st.sampled_from([5, None, "nope", ""]),
                 to=st.sampled_from([5, b"x", [1]]), move=st.sampled_from(NOT_BOOL),
                 have=st.sampled_from([5, "ab", [[0]], [["a", 1]], [[0, NAN]]])),
        ),
        messages.DROP_REPLICAS: (dict(alloc_id=nobody, indices=[0], __required__=("alloc_id", "indices")),
                                 dict(alloc_id=wid(), indices=bad_int_list(0, wire=True))),
        messages.PULL: (
            dict(alloc_id=nobody, owner=owner, chunks=[], __required__=("alloc_id", "owner", "chunks")),
            dict(alloc_id=wid(), owner=wstr, after_release=ticket,
                 chunks=st.sampled_from(["ab", 5, [5], [{}], [{"index": "a", "home": worker, "path": "comm",
                                                              "version": 0}],
                                         [{"index": 0, "home": 5, "path": "comm", "version": 0}],
                                         [{"index": 0, "home": worker, "path": "nope", "version": 0}],
                                         [{"index": 0, "home": worker, "path": "comm", "version": NAN}]])),
        ),
        messages.REFRESH: (
            dict(alloc_id=nobody, owner=owner, chunks=[], __required__=("alloc_id", "owner", "chunks")),
            dict(alloc_id=wid(), owner=wstr,
                 chunks=st.sampled_from(["ab", 5, [5], [[0]], [["a", worker, "comm", 0]], [[0, 5, "comm", 0]],
                                         [[0, worker, "nope", 0]], [[0, worker, "comm", NAN]]])),
        ),
        messages.PROMOTE: (dict(alloc_id=nobody, owner=owner, indices=[], __required__=("alloc_id", "owner", "indices")),
                           dict(alloc_id=wid(), owner=wstr, indices=bad_int_list(0, wire=True), meta=bad_meta)),
        messages.STORE_REPORT: (dict(scheduler="test", __required__=("scheduler",)), dict(scheduler=wstr)),
        messages.IPC_FORGET: (dict(holder=worker, handles=[], __required__=("holder", "handles")),
                              dict(holder=wstr, handles=st.sampled_from([5, "ab", {"k": 1}]),
                                   timeout=st.sampled_from([NAN, -1.0, "a", INF, [1]]))),
    }


# Refusals that name what the argument names rather than the argument: an allocation the
# GVAT never gave or freed, a byte range outside its chunk (the store's own check).
NAMED = {"alloc_id": ("alloc_id", "allocation"), "pieces": ("pieces", "asked of chunk")}


def rpc_call(client, rpc, handler, kwargs):
    kwargs = {k: v for k, v in kwargs.items() if k != "__required__"}
    return lambda: client.sync(messages.call, rpc, handler, **kwargs)


def test_scheduler_handlers_refuse_invalid_arguments(case):
    client = case.client
    buf = dgvm.malloc(4096, chunk_bytes=1024, client=client)
    try:
        requests = scheduler_requests(buf, client, buf.home(0))
        assert set(requests) - {"allocate-grid"} == messages.SCHEDULER_HANDLERS

        @SETTINGS
        @given(st.data())
        def run(data):
            name = data.draw(st.sampled_from(sorted(requests)))
            template, bad = requests[name]
            kwargs, arg = mutate(data, template, bad)
            handler = messages.ALLOCATE if name == "allocate-grid" else name
            check(f"{handler}({arg}={kwargs.get(arg)!r:.50})", rpc_call(client, client.scheduler, handler, kwargs),
                  NAMED.get(arg, arg), rpc=True)

        run()
        np.testing.assert_array_equal(buf.read(0, 8), np.zeros(8, np.uint8))
        assert [a.alloc_id for a in dgvm.table(client=client)] == [buf.alloc_id]
    finally:
        buf.free()
    still_works(case)


def test_worker_handlers_refuse_invalid_arguments(case):
    client = case.client
    buf = dgvm.malloc(4096, chunk_bytes=1024, client=client)
    try:
        worker = buf.home(0)
        requests = worker_requests(buf, client, worker)
        assert set(requests) == messages.WORKER_HANDLERS

        @SETTINGS
        @given(st.data())
        def run(data):
            name = data.draw(st.sampled_from(sorted(requests)))
            template, bad = requests[name]
            kwargs, arg = mutate(data, template, bad)
            check(f"{name}({arg}={kwargs.get(arg)!r:.50})", rpc_call(client, client.rpc(worker), name, kwargs),
                  NAMED.get(arg, arg), rpc=True)

        run()
        np.testing.assert_array_equal(buf.read(0, 8), np.zeros(8, np.uint8))
    finally:
        buf.free()
    still_works(case)


def test_refusals_over_rpc_are_decoded_argument_errors(case):
    """A handler's argument refusal reaches the caller as the same error, naming it."""
    with pytest.raises(dgvm.InvalidArgumentType, match="include_lost"):
        call_scheduler(messages.WORKERS, case.client, include_lost="yes")
    with pytest.raises(dgvm.InvalidArgumentType, match="bogus"):
        call_scheduler(messages.STATS, case.client, bogus=1)
    with pytest.raises(dgvm.InvalidArgument, match="alloc_id"):
        call_scheduler(messages.CHUNK_MAP, case.client, alloc_id=-3)
    assert math.isfinite(len(dgvm.workers(client=case.client)))


def test_a_release_ticket_never_sent_to_a_worker_is_refused_at_once(case):
    """A request that names a release (``after_release``) the scheduler never sent to that
    worker is refused, not waited for; one it sent is waited for and done."""
    client = case.client
    buf = dgvm.malloc(4096, chunk_bytes=1024, placement="round_robin", client=client)
    try:
        old = buf.home(0)
        target = next(w for w in buf.homes() if w != old)
        assert buf.migrate([0], target) == [0]  # the old home is told to release chunk 0
        sent = call_scheduler(messages.RELEASES_SENT, client, worker=old)
        assert isinstance(sent, int)
        info = client.sync(messages.call, client.rpc(old), messages.STORE_INFO, after_release=sent)
        assert info["address"] == old
        for never in (sent + 1, 10**6):
            with pytest.raises(dgvm.InvalidArgument, match=f"after_release {never}: the scheduler sent no such"):
                client.sync(messages.call, client.rpc(old), messages.STORE_INFO, after_release=never)
        fresh = next(w.address for w in dgvm.workers(client=client)
                     if call_scheduler(messages.RELEASES_SENT, client, worker=w.address) is None)
        with pytest.raises(dgvm.InvalidArgument, match="after_release 0"):
            client.sync(messages.call, client.rpc(fresh), messages.STORE_INFO, after_release=0)
        assert sum(dgvm.stats(client=client)["workers"][w]["rehomes"] for w in buf.homes()) >= 1
    finally:
        buf.free()
