"""Chaos: a seeded random program on worker processes killed at random points.

    python benchmarks/chaos.py [--seconds 300] [--seed 0] [--workers 4]

A local ``cpu`` cluster of worker processes (each under a nanny, which starts a new worker
after a kill). One driver runs a seeded mix of allocations (``dgvm.malloc``,
``dgvm.array``), elementwise operations, reductions, writes through views, launches of
small kernels, migrations and rebalances, and checks every answer against a NumPy copy of
each array and buffer. At seeded random points it starts an operation and SIGKILLs a worker
process while the operation runs (at least two workers stay alive). Then:

- the chunks the GVAT reports ``lost`` are exactly those the killed worker held when it
  died (the table just before the kill) with no copy elsewhere (a third of the arrays and
  buffers keep ``replicas=2``), for every allocation the operation in flight did not move;
- the operation in flight answers right (equal to NumPy) or with ``ChunkLost`` naming only
  lost chunks, or, where a task of it had finished on the killed worker and the chunks it
  read were kept by copies, naming that task's result as lost with the worker;
- every array and buffer with a lost chunk answers ``ChunkLost`` naming its lost chunks
  (a full read names exactly those), or NumPy's answer where a ``dgvm.array`` result is
  made again from its lineage (then it is whole again); its other chunks still read and
  write right, and its ``free`` returns; every other one keeps answering right.

Every call runs in a thread joined with a timeout: one that does not answer within
``BOUND`` seconds is a hang, and the run stops there. At the end everything is freed: the
GVAT holds nothing, the survivors' stores hold nothing, and no shared-memory arena of a
killed worker (nor, once the cluster closed, of any worker) is left in ``/dev/shm``.

Prints the counts: operations, kills, right answers, ChunkLost answers, wrong answers,
raw errors, hangs, leaks. ``tests/test_chaos.py`` runs the same program, shorter.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field

import numpy as np
from numba import cuda

import dgvm
import dgvm.array as dnp
from dgvm.array._engine.lifecycle import drain_releases

TRACE = bool(os.environ.get("DGVM_CHAOS_TRACE"))  # print every answer
BOUND = 30.0  # seconds any one call may take, a worker's death included
SETTLE = 5.0  # seconds a worker is up before it may be killed
LOST_NAMES = re.compile(r"chunks? \[?([\d, ]+)\]? of allocation (\d+)")
RESULT_LOST = re.compile(r"ran on worker \S+, which left the cluster holding no chunk .*; its result was lost with it")
FEW_WORKERS = re.compile(r"replicas=\d+ keeps each chunk on \d+ workers; 1 live workers")


@dgvm.kernel
def add_one(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + 1


@dgvm.kernel
def axpy(a, x, out):
    """``out = a * x + out``: reads its output, so it runs on a copy of it."""
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + out[i]


class Hang(AssertionError):
    """A call that did not answer within its bound."""


def bounded(call, timeout: float = BOUND):
    """``call()`` in a thread joined with ``timeout``: its result, or the exception it
    raised as a value; ``Hang`` if it did not answer in time."""
    box = {}

    def run():
        try:
            box["out"] = call()
        except BaseException as e:  # noqa: BLE001  (judged by the caller)
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise Hang(f"{getattr(call, '__name__', call)} did not answer within {timeout} s")
    return box["error"] if "error" in box else box.get("out")


def ask(call, timeout: float = BOUND):
    """``bounded`` for the program's own questions (the workers, the table): an error is
    raised here."""
    out = bounded(call, timeout)
    if isinstance(out, BaseException):
        raise out
    return out


def named_chunks(error: Exception) -> dict[int, set[int]]:
    """Allocation id -> chunk indices a ``ChunkLost`` message names."""
    named: dict[int, set[int]] = {}
    for chunks, alloc in LOST_NAMES.findall(str(error)):
        named.setdefault(int(alloc), set()).update(int(c) for c in chunks.split(",") if c.strip())
    return named


@dataclass(eq=False)
class Item:
    """An array or a buffer of the program, with its NumPy copy."""

    handle: object  # DArray or GlobalBuffer
    mirror: np.ndarray  # the values (a buffer's: its bytes)
    lost: set = field(default_factory=set)  # chunk indices the GVAT reports lost
    unsure: bool = False  # an operation writing it failed midway: values unknown

    @property
    def is_array(self) -> bool:
        return not isinstance(self.handle, dgvm.GlobalBuffer)

    @property
    def alloc(self):
        return self.handle.alloc if self.is_array else self.handle

    @property
    def alloc_id(self) -> int:
        return self.alloc.alloc_id

    def bounds(self) -> np.ndarray:
        """Chunk k holds elements (a buffer: bytes) ``[bounds[k], bounds[k + 1])``."""
        return self.alloc.offsets // (self.mirror.itemsize if self.is_array else 1)

    def chunks_of(self, lo: int, hi: int, step: int = 1) -> set[int]:
        """The chunks holding elements ``lo:hi:step``."""
        idx = np.arange(lo, hi, step)
        return set((np.searchsorted(self.bounds(), idx, side="right") - 1).tolist())

    def read_all(self) -> np.ndarray:
        return dnp.asnumpy(self.handle) if self.is_array else self.handle.read(0, self.mirror.size)

    def survivors(self) -> list[int]:
        return [k for k in range(len(self.bounds()) - 1) if k not in self.lost]


def equal(expected):
    """A check that an answer equals ``expected`` (NumPy's)."""
    def check(got):
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12, atol=1e-9)
    return check


@dataclass
class Op:
    """An operation drawn from the seed: ``call`` talks to the cluster and answers (maybe
    racing a kill), ``check`` raises AssertionError for a wrong answer, ``apply`` updates
    the NumPy copies once it answered right. A ChunkLost may name lost chunks of
    ``touched``; a failure leaves ``writes`` unsure; ``made``: results to free if it fails."""

    name: str
    call: object
    check: object = None
    touched: list = field(default_factory=list)
    writes: list = field(default_factory=list)
    apply: object = None
    made: list = field(default_factory=list)


@dataclass
class Counts:
    operations: int = 0
    kills: int = 0
    right: int = 0
    chunk_lost: int = 0
    wrong: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    hangs: list = field(default_factory=list)
    leaks: list = field(default_factory=list)
    frees_after_loss: list = field(default_factory=list)  # seconds each took
    surviving_lost: int = 0  # ChunkLost answers for surviving chunks of a damaged array
    departures: int = 0  # workers that left: killed, or gone on their own
    refused: int = 0  # operations racing a death that raised a DgvmError naming the worker
    few_workers: int = 0  # replicas=2 asked while one worker was up: refused, saying so
    results_lost: int = 0  # operations racing a death whose finished task's result died with it
    recomputed: int = 0  # answers from arrays that lost chunks, made again from their lineage

    def summary(self) -> dict:
        return {
            "operations": self.operations, "kills": self.kills,
            "workers gone on their own": self.departures - self.kills, "right": self.right,
            "ChunkLost": self.chunk_lost, "of them for surviving chunks": self.surviving_lost,
            "DgvmError naming the dead worker": self.refused,
            "results lost with the dead worker": self.results_lost,
            "made again from lineage": self.recomputed,
            "replicas refused with one worker up": self.few_workers, "wrong": len(self.wrong), "raw errors": len(self.errors),
            "hangs": len(self.hangs), "leaks": len(self.leaks),
        }


class Expect:
    RIGHT = "right"  # must equal NumPy
    LOST = "lost"  # must be ChunkLost naming lost chunks
    EITHER = "either"  # raced a kill: right, or ChunkLost naming lost chunks
    SURVIVING = "surviving"  # chunks that survived, of an array that lost others: EITHER


class Chaos:
    """The program: ``step()`` runs one seeded operation, ``kill()`` one seeded kill."""

    def __init__(self, client, seed: int, max_items: int = 12):
        self.client = client
        self.rng = np.random.default_rng(seed)
        self.items: list[Item] = []
        self.max_items = max_items
        self.counts = Counts()
        self.lost: dict[int, set[int]] = {}  # the GVAT's lost chunks, by allocation
        self.known: set[int] = set()  # the allocations the GVAT had after the last kill
        self.victims: list[tuple[str, str | None]] = []  # (address, arena) of each worker gone
        self.arenas: dict[str, str] = {}  # worker -> its shared-memory arena
        self.first_seen: dict[str, float] = {}  # worker -> when the program first saw it
        self.present: set[str] = set()  # the workers alive when last asked

    # -- judging answers --------------------------------------------------------------
    def judge(self, what: str, outcome, expect: str, check=None, touched=(), writes=(), lost_check=None) -> bool:
        """Count ``outcome`` (a value or an exception) of operation ``what``; True if right.
        ``check(value)`` raises AssertionError for a wrong value; ``touched``: the items whose
        lost chunks a ChunkLost may name; ``writes``: items left unsure by a failure."""
        c = self.counts
        c.operations += 1
        if TRACE:
            print(f"  {what} {[i.alloc_id for i in touched]} w{[i.alloc_id for i in writes]} {expect}: "
                  f"{outcome!r:.150}", flush=True)
        if isinstance(outcome, dgvm.ChunkLost):
            named = named_chunks(outcome)
            bad = {a: n - self.lost.get(a, set()) for a, n in named.items()
                   if n - self.lost.get(a, set()) and not self.vanished(a, outcome)}
            if expect == Expect.RIGHT:
                c.wrong.append((what, f"ChunkLost where nothing was lost: {outcome}"))
            elif (not named and expect == Expect.EITHER and self.victims and RESULT_LOST.search(str(outcome))
                  and any(f"worker {w}," in str(outcome) for w, _ in self.victims[-3:])):
                c.results_lost += 1  # raced the death: its chunks kept by copies, its result not
            elif not named or bad:
                c.wrong.append((what, f"ChunkLost naming chunks not lost {bad}: {outcome}"))
            elif expect in (Expect.LOST, Expect.SURVIVING) and not any(i.alloc_id in named for i in touched):
                c.wrong.append((what, f"ChunkLost naming none of {[i.alloc_id for i in touched]}: {outcome}"))
            else:
                try:
                    if lost_check is not None:
                        lost_check(outcome)
                    c.chunk_lost += 1
                    c.surviving_lost += expect == Expect.SURVIVING
                except AssertionError as e:
                    c.wrong.append((what, f"{e}: {outcome}"))
            for i in writes:
                i.unsure = True
            return False
        if (expect == Expect.EITHER and isinstance(outcome, dgvm.DgvmError) and self.victims
                and self.victims[-1][0] in str(outcome)):
            c.refused += 1  # raced the death: a dgvm error naming the worker that left
            for i in writes:
                i.unsure = True
            return False
        if isinstance(outcome, dgvm.InvalidArgument) and FEW_WORKERS.search(str(outcome)):
            c.few_workers += 1
            return False
        if isinstance(outcome, BaseException):
            c.errors.append((what, repr(outcome)))
            for i in writes:
                i.unsure = True
            return False
        if expect == Expect.LOST and check is None:
            c.wrong.append((what, f"an answer from lost data: {outcome!r:.200}"))
            return False
        try:
            if check is not None:
                check(outcome)
        except AssertionError as e:
            c.wrong.append((what, ("an answer from lost data, not NumPy's: " if expect == Expect.LOST else "")
                            + str(e)[:500]))
            return False
        c.right += 1
        if expect == Expect.LOST:
            c.recomputed += 1  # NumPy's answer: the array was made again from its lineage
        self.note_recomputed(touched)
        return True

    def note_recomputed(self, items) -> None:
        """Items that lost chunks and now stand on a new allocation were made again from
        their lineage (``dgvm.array``): whole again."""
        for i in items:
            if i.lost and i.alloc_id not in self.lost:
                i.lost = set()

    def vanished(self, alloc_id: int, error) -> bool:
        """An allocation the GVAT no longer had once the worker was gone (made and freed
        again by the operation that raced the kill) whose chunks ``error`` says were on
        that worker: its lost chunks cannot be checked."""
        return (alloc_id not in self.known and bool(self.victims)
                and f"worker {self.victims[-1][0]}" in str(error))

    # -- the pool ---------------------------------------------------------------------
    def live_workers(self) -> list[str]:
        return sorted(ask(lambda: self.client.run_on_scheduler(
            lambda dask_scheduler: list(dask_scheduler.workers))))

    def pick(self, arrays: bool | None = None) -> Item | None:
        pool = [i for i in self.usable() if arrays is None or i.is_array == arrays]
        return pool[self.rng.integers(len(pool))] if pool else None

    def values(self, n: int) -> np.ndarray:
        return self.rng.integers(-1000, 1000, n).astype(np.float64)  # exact sums

    def new_array(self) -> "Op":
        n = int(self.rng.integers(64, 2400))
        chunks = int(self.rng.choice([50, 100, 250, 500]))
        placement = str(self.rng.choice(["balanced", "round_robin", "packed"]))
        replicas = int(self.rng.choice([1, 1, 2]))  # a third keep a copy of each chunk
        h = self.values(n)
        made = []

        def call():
            made.append(dnp.from_numpy(h, chunks=chunks, placement=placement, replicas=replicas))

        return Op("from_numpy", call, made=made, apply=lambda: self.items.append(Item(made[0], h)))

    def new_buffer(self) -> "Op":
        n = int(self.rng.integers(512, 32768))
        chunk = int(self.rng.choice([256, 1024, 4096]))
        placement = str(self.rng.choice(["balanced", "round_robin"]))
        replicas = int(self.rng.choice([1, 1, 2]))
        h = self.rng.integers(0, 256, n, dtype=np.uint8)
        made = []

        def call():
            made.append(dgvm.malloc(n, chunk_bytes=chunk, placement=placement, replicas=replicas))
            made[0].write(0, h)
            return made[0].read(0, n)

        return Op("malloc", call, equal(h), made=made, apply=lambda: self.items.append(Item(made[0], h)))

    def release(self, item: Item) -> None:
        """Free ``item`` now: it answers at once, also when it lost chunks."""
        self.items.remove(item)
        t0 = time.perf_counter()
        out = bounded(item.handle.free)
        if item.lost:
            self.counts.frees_after_loss.append(time.perf_counter() - t0)
        if TRACE:
            print(f"  free {item.alloc_id} {time.perf_counter() - t0:.3f} s")
        self.judge("free", out, Expect.RIGHT)

    def free(self, item: Item) -> "Op":
        self.items.remove(item)  # whatever the free says, nothing uses it again
        return Op("free", item.handle.free)

    # -- operations -------------------------------------------------------------------
    def operation(self) -> "Op":
        """A seeded operation (drawn here, run later, maybe racing a kill)."""
        rng = self.rng
        kind = str(rng.choice(["array", "buffer", "elementwise", "reduce", "read", "setitem", "view",
                               "launch", "migrate", "rebalance", "bufwrite", "bufread", "free"],
                              p=[.09, .05, .14, .1, .08, .1, .08, .1, .1, .03, .05, .05, .03]))
        x = self.pick(arrays=True)
        if kind == "buffer":
            return self.new_buffer()
        if kind == "array" or x is None or len(self.items) < 3:
            return self.new_array()
        if kind == "free" or len(self.items) > self.max_items:
            return self.free(self.pick())
        h = x.mirror
        n = h.size
        if kind == "elementwise":
            same = [i for i in self.usable() if i.is_array and i.mirror.size == n]
            y = same[rng.integers(len(same))]
            s, t = float(rng.integers(-5, 5)), float(rng.integers(-50, 50))
            form = int(rng.integers(4))
            if form == 0:
                expr, want = (lambda: x.handle * s + t), h * s + t
            elif form == 1:
                expr, want = (lambda: x.handle + y.handle * s), h + y.mirror * s
            elif form == 2:
                expr, want = (lambda: dnp.where(x.handle > t, x.handle, -y.handle)), np.where(h > t, h, -y.mirror)
            else:
                expr, want = (lambda: dnp.abs(x.handle - y.handle) + 1), np.abs(h - y.mirror) + 1
            made = []

            def call():
                made.append(expr().persist())  # stored: its chunks are what a kill takes
                return dnp.asnumpy(made[0])

            return Op("elementwise", call, equal(want), [x, y], made=made,
                      apply=lambda: self.items.append(Item(made[0], want)))
        if kind == "reduce":
            calls = [(lambda: float(x.handle.sum()), h.sum()), (lambda: float(x.handle.max()), h.max()),
                     (lambda: float(x.handle.mean()), h.mean()),
                     (lambda: float((x.handle * 2 - 1).sum()), (h * 2 - 1).sum()),
                     (lambda: float(dnp.sum(x.handle[::3])), h[::3].sum())]
            call, want = calls[int(rng.integers(len(calls)))]
            return Op("reduce", call, equal(want), [x])
        lo = int(rng.integers(n))
        hi = int(rng.integers(lo, n + 1))
        step = int(rng.integers(1, 4))
        if kind == "read":
            return Op("read", lambda: dnp.asnumpy(x.handle[lo:hi:step]), equal(h[lo:hi:step]), [x])
        if kind in ("setitem", "view"):
            want = h.copy()
            v = float(rng.integers(-100, 100))
            form = int(rng.integers(2))
            if kind == "setitem":
                def write():
                    x.handle[lo:hi:step] = v
                want[lo:hi:step] = v
            elif form == 0:
                def write():
                    view = x.handle[lo:hi]
                    view[::step] += v  # in place, through a view of a view
                want[lo:hi][::step] += v
            else:
                vals = self.values(len(range(lo, hi, step)))

                def write():
                    view = x.handle[lo:hi:step]
                    view[...] = vals
                want[lo:hi:step] = vals

            def call():
                write()
                return dnp.asnumpy(x.handle)

            return Op(kind, call, equal(want), [x], [x], apply=lambda: setattr(x, "mirror", want))
        if kind == "launch":
            outs = [i for i in self.usable() if i.is_array and i.mirror.size == n and i.handle.chunks == x.handle.chunks]
            out = outs[rng.integers(len(outs))]  # x itself at least
            if rng.random() < 0.5:
                a = float(rng.integers(-3, 4))
                want = a * h + out.mirror
                run = lambda: dgvm.launch(axpy, a, x.handle, out=out.handle)  # noqa: E731
            else:
                want = h + 1
                run = lambda: dgvm.launch(add_one, x.handle, out=out.handle)  # noqa: E731

            def call():
                run()
                return dnp.asnumpy(out.handle)

            return Op("launch", call, equal(want), [x, out], [out], apply=lambda: setattr(out, "mirror", want))
        if kind in ("migrate", "rebalance"):
            target = self.pick()
            nchunks = target.alloc.nchunks
            picks = sorted(set(rng.integers(nchunks, size=int(rng.integers(1, nchunks + 1))).tolist()))
            workers = self.live_workers()
            to = workers[rng.integers(len(workers))]
            move = (lambda: target.handle.migrate(picks, to)) if kind == "migrate" else dgvm.rebalance

            def call():
                move()
                return target.read_all()

            return Op(kind, call, equal(target.mirror), [target])
        b = self.pick(arrays=False)
        if b is None:
            return self.new_buffer()
        m = b.mirror.size
        lo = int(rng.integers(m))
        hi = int(rng.integers(lo, m + 1))
        if kind == "bufwrite":
            data = rng.integers(0, 256, hi - lo, dtype=np.uint8)
            want = b.mirror.copy()
            want[lo:hi] = data

            def call():
                b.handle.write(lo, data)
                return b.handle.read(0, m)

            return Op("bufwrite", call, equal(want), [b], [b], apply=lambda: setattr(b, "mirror", want))
        return Op("bufread", lambda: b.handle.read(lo, hi - lo), equal(b.mirror[lo:hi]), [b])

    def usable(self) -> list[Item]:
        return [i for i in self.items if not i.lost and not i.unsure]

    def finish_op(self, op: "Op", outcome, expect: str) -> None:
        """Judge ``op``'s outcome; free a result it made that never became an item."""
        if self.judge(op.name, outcome, expect, op.check, op.touched, op.writes):
            if op.apply is not None:
                op.apply()
        else:
            for r in op.made:
                self.judge(f"free of {op.name}'s result", bounded(r.free), Expect.RIGHT)

    def step(self) -> None:
        """One operation; judged as racing a departure if a worker left meanwhile."""
        op = self.operation()
        outcome = bounded(op.call)
        gone = self.departed()
        if gone:
            self.aftermath(gone, op, outcome)
        else:
            self.finish_op(op, outcome, Expect.RIGHT)

    # -- kills ------------------------------------------------------------------------
    def departed(self) -> list[str]:
        """Workers that left since last asked (killed here, or gone on their own: a nanny
        gives up on a worker that starts too slowly); notes the new ones and their arenas."""
        now = set(self.live_workers())
        gone = sorted(self.present - now)
        for w in now - self.present:
            self.first_seen.setdefault(w, time.monotonic())
        for w in now - set(self.arenas):  # (a worker just started may not have its store yet)
            arena = bounded(lambda: self.client.run(
                lambda dask_worker: dask_worker.extensions["dgvm"].backend.shm_name, workers=[w]))
            if isinstance(arena, dict) and w in arena:
                self.arenas[w] = arena[w]
        self.present = now
        return gone

    def kill(self) -> bool:
        """SIGKILL a worker process while an operation runs; then judge what followed.
        False if fewer than three workers are alive (two always stay)."""
        gone = self.departed()
        if gone:  # left on their own since the last operation
            self.aftermath(gone, None, None)
        workers = sorted(self.present)
        now = time.monotonic()
        # A worker a nanny started a moment ago is not killed: its nanny may still be
        # starting it, and a kill then ends the nanny too (Dask's), not only the worker.
        settled = [w for w in workers if now - self.first_seen[w] > SETTLE and w in self.arenas]
        if len(workers) < 3 or not settled:
            if TRACE:
                print(f"no kill: {len(workers)} workers, {len(settled)} settled")
            return False
        victim = settled[self.rng.integers(len(settled))]
        pid = ask(lambda: self.client.run(os.getpid, workers=[victim]))[victim]
        delay = float(self.rng.uniform(0, 0.05))
        op = self.operation()
        box = {}

        def race():
            box["outcome"] = bounded(op.call)  # no outcome: a hang

        racing = threading.Thread(target=race, daemon=True)
        racing.start()
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        # Where the chunks were as it died: nothing moves to or from a dead process.
        before = ask(lambda: dgvm.table(chunks=True))
        if TRACE:
            print(f"kill {victim} during {op.name} {[i.alloc_id for i in op.touched]} after {delay:.3f} s")
        self.counts.kills += 1
        deadline = time.monotonic() + BOUND
        while victim in self.live_workers():
            if time.monotonic() > deadline:
                raise Hang(f"the scheduler did not remove {victim} within {BOUND} s")
            time.sleep(0.02)
        racing.join(BOUND + 1)
        if "outcome" not in box:
            raise Hang(f"{op.name} racing the kill of {victim} did not answer")
        gone = self.departed()
        self.aftermath(gone, op, box["outcome"], before if gone == [victim] else None)
        return True

    def aftermath(self, gone: list[str], op: Op | None, outcome, before=None) -> None:
        """Workers ``gone`` left while ``op`` ran: learn what the GVAT lost, judge ``op``
        (right, or ChunkLost naming lost chunks), check ``before`` (the table as they
        died) against the loss, probe and free every array and buffer that lost chunks."""
        self.counts.departures += len(gone)
        self.victims.extend((w, self.arenas.get(w)) for w in gone)
        if TRACE:
            print(f"gone: {gone}")
        after = ask(lambda: dgvm.table(chunks=True))
        for a in after:  # ids are never reused: lost chunks of earlier kills stay named
            lost = {c.index for c in a.chunks if c.tier == "lost"}
            if lost:
                self.lost.setdefault(a.alloc_id, set()).update(lost)
        self.known = {a.alloc_id for a in after}
        if op is not None:
            if before is not None:
                self.check_lost_is_what_died(before, after, gone[0], moved=op.name in ("migrate", "rebalance"))
            self.finish_op(op, outcome, Expect.RIGHT if op.name == "free" else Expect.EITHER)
        for item in self.items:
            item.lost = set(self.lost.get(item.alloc_id, ()))
        self.probe_damaged()

    def check_lost_is_what_died(self, before, after, victim: str, moved: bool) -> None:
        """The GVAT's lost chunks are those the victim held when it died with no copy
        elsewhere (unless the operation racing the kill moved chunks)."""
        held = {a.alloc_id: {c.index for c in a.chunks
                             if c.worker == victim and not [w for w in c.backups if w != victim]}
                for a in before}
        for a in after:
            if a.alloc_id not in held or moved:
                continue
            lost = {c.index for c in a.chunks if c.tier == "lost" and c.worker == victim}
            if lost != held[a.alloc_id]:
                self.counts.wrong.append(("lost set", f"allocation {a.alloc_id}: lost {sorted(lost)}, "
                                                      f"on {victim} at the kill {sorted(held[a.alloc_id])}"))

    def probe_damaged(self) -> None:
        """Every item with lost chunks answers ChunkLost where they are involved and right
        elsewhere, then is freed; items a failed write left unsure are freed."""
        for item in list(self.items):
            if item.lost and not item.unsure:
                self.probe(item)
            if item.lost or item.unsure:
                self.release(item)

    def probe(self, item: Item) -> None:
        """A full read names exactly the lost chunks; the surviving chunks read and write
        right; a use of a lost chunk answers ChunkLost."""
        rng = self.rng
        h = item.mirror
        bounds = item.bounds()
        lost = sorted(item.lost)

        def exactly(error):
            if named_chunks(error).get(item.alloc_id) != item.lost:
                raise AssertionError(f"names {named_chunks(error)}, lost {lost} of allocation {item.alloc_id}")
        self.judge("full read of a damaged one", bounded(item.read_all), Expect.LOST, equal(h),
                   touched=[item], lost_check=exactly)
        if not item.lost:
            return  # made again from its lineage: whole
        alive = item.survivors()
        if alive:
            k = alive[rng.integers(len(alive))]
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            part = (lambda: dnp.asnumpy(item.handle[lo:hi])) if item.is_array else \
                (lambda: item.handle.read(lo, hi - lo))
            # Right, or a ChunkLost naming its lost chunks (a computed result whose task ran
            # on the worker that died fails every wait: docs/architecture.md).
            self.judge("read of a surviving chunk", bounded(part), Expect.SURVIVING, equal(h[lo:hi]),
                       touched=[item])
            v = h[lo:hi] * 0 + 7

            def write():
                if item.is_array:
                    item.handle[lo:hi] = v
                else:
                    item.handle.write(lo, v)
                return part()
            if self.judge("write to a surviving chunk", bounded(write), Expect.SURVIVING, equal(v),
                          touched=[item], writes=[item]):
                h[lo:hi] = v
        if not item.lost:
            return
        k = lost[rng.integers(len(lost))]
        lo, hi = int(bounds[k]), int(bounds[k + 1])
        # Each answer, if any, must be NumPy's (the array made again from its lineage).
        if item.is_array:
            uses = [("sum", lambda: float(item.handle.sum()), equal(h.sum()), None),
                    ("x + 1", lambda: dnp.asnumpy(item.handle + 1), equal(h + 1), None),
                    ("slice", lambda: dnp.asnumpy(item.handle[lo:hi]), equal(h[lo:hi]), None),
                    ("launch", lambda: dgvm.launch(add_one, item.handle, out=item.handle)
                     or dnp.asnumpy(item.handle), equal(h + 1), h + 1)]
        else:
            uses = [("read", lambda: item.handle.read(lo, hi - lo), None, None),
                    ("write", lambda: item.handle.write(lo, np.zeros(hi - lo, np.uint8)), None, None)]
        name, use, check, after = uses[rng.integers(len(uses))]
        if self.judge(f"{name} of a lost chunk", bounded(use), Expect.LOST, check, touched=[item],
                      writes=[item] if after is not None else []) and after is not None:
            h[...] = after

    # -- the end ----------------------------------------------------------------------
    def finish(self) -> None:
        """Free everything; count what the GVAT, the survivors' stores and /dev/shm kept."""
        for item in list(self.items):
            self.release(item)
        ask(drain_releases)
        left = ask(dgvm.table)
        if left:
            self.counts.leaks.append(f"the GVAT holds {len(left)} allocations: {left[:3]}")
        ask(dgvm.stats)  # the releases sent to old homes are done
        held = self.every_store(lambda dask_worker: (
            dask_worker.extensions["dgvm"].backend.used, dask_worker.extensions["dgvm"].metrics()["chunks"]))
        for w, (used, chunks) in held.items():
            if used or chunks:
                self.counts.leaks.append(f"worker {w} holds {chunks} chunks, {used} bytes")
        dead = {a for _, a in self.victims if a}
        maps = self.every_store(lambda: open("/proc/self/maps").read())
        for w, text in maps.items():
            kept = sorted({a for a in dead if a in text})
            if kept:
                self.counts.leaks.append(f"worker {w} still maps the arenas of killed workers {kept}")
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline and any(os.path.exists(f"/dev/shm/{a}") for a in dead):
            time.sleep(0.05)
        for w, a in self.victims:
            if a and os.path.exists(f"/dev/shm/{a}"):
                self.counts.leaks.append(f"the arena {a} of killed worker {w}")
        self.arenas.update(self.every_store(lambda dask_worker: dask_worker.extensions["dgvm"].backend.shm_name))

    def every_store(self, fn) -> dict:
        """``fn(dask_worker)`` on every worker, once a worker a nanny restarted has its store."""
        deadline = time.monotonic() + BOUND
        while True:
            try:
                return ask(lambda: self.client.run(fn))
            except KeyError:  # a new worker whose plugin is not set up yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def run(client, seed: int, operations: int | None = None, seconds: float | None = None,
        kill_every: float = 12.0) -> Chaos:
    """The program on ``client``: ``operations`` steps (or ``seconds`` of them), a kill
    after every ``kill_every`` operations on average (seeded). Stops at the first hang."""
    chaos = Chaos(client, seed)
    for w in chaos.live_workers():
        chaos.first_seen[w] = -SETTLE  # the cluster's own workers are settled
    chaos.departed()
    t0 = time.monotonic()
    n = 0
    try:
        while (operations is None or n < operations) and (seconds is None or time.monotonic() - t0 < seconds):
            n += 1
            if n > 5 and chaos.rng.random() < 1 / kill_every:
                chaos.kill()
            else:
                chaos.step()
        chaos.finish()
    except Hang as e:
        chaos.counts.hangs.append(str(e))
        if TRACE:  # what the cluster was still doing
            print("tasks not done:", bounded(lambda: client.run_on_scheduler(lambda dask_scheduler: [
                (k, ts.state, sorted(ts.worker_restrictions or ()), [d.key for d in ts.waiting_on or ()],
                 ts.processing_on.address if ts.processing_on else None)
                for k, ts in dask_scheduler.tasks.items() if ts.state not in ("memory", "erred")])))
    return chaos


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=300.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--kill-every", type=float, default=12.0, help="operations per kill, on average")
    args = p.parse_args(argv)
    if not TRACE:
        logging.getLogger("distributed").setLevel(logging.CRITICAL)
        logging.getLogger("dgvm").setLevel(logging.ERROR)
    os.environ["DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED"] = "False"
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "critical")  # the workers' "Compute Failed"
    cluster = dgvm.LocalCluster(n_workers=args.workers, backend="cpu", processes=True,
                                device_memory="64MiB", dashboard_address=None)
    client = dgvm.connect(cluster)
    t0 = time.perf_counter()
    try:
        chaos = run(client, args.seed, seconds=args.seconds, kill_every=args.kill_every)
    finally:
        client.close()
        cluster.close()
    left = sorted(a for a in chaos.arenas.values() if os.path.exists(f"/dev/shm/{a}"))
    if left:
        chaos.counts.leaks.append(f"arenas left after the cluster closed: {left}")
    c = chaos.counts
    print(f"chaos: seed {args.seed}, {args.workers} worker processes, {time.perf_counter() - t0:.0f} s")
    for k, v in c.summary().items():
        print(f"  {k:<29} {v}")
    if c.frees_after_loss:
        print(f"  frees of damaged allocations: {len(c.frees_after_loss)}, median "
              f"{statistics.median(c.frees_after_loss):.3f} s, slowest {max(c.frees_after_loss):.3f} s")
    for what, items in (("wrong", c.wrong), ("raw errors", c.errors), ("hangs", c.hangs), ("leaks", c.leaks)):
        for x in items[:10]:
            print(f"  {what}: {x}")
    return 0 if not (c.wrong or c.errors or c.hangs or c.leaks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
