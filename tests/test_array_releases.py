"""An array held only through a reference cycle (say, by the traceback of a call that failed)
goes back with a garbage collection: ``drain_releases`` gets one to run in its thread after
the client's event loop dropped what it held, whatever other threads are doing meanwhile
(dgvm.array._engine.lifecycle)."""

from __future__ import annotations

import gc
import sys
import threading

import dgvm
import dgvm.array as dnp
from dgvm.array._engine.lifecycle import drain_releases


def only_in_a_cycle(case):
    """A new array's allocation id; the array is held only by a reference cycle."""
    x = dnp.ones(4096, chunks=1024, client=case.client)
    cycle = [x]
    cycle.append(cycle)
    return x.alloc_id


def when_calling(names, action) -> threading.Event:
    """Run ``action()`` once the main thread runs the functions ``names`` (each called,
    perhaps through others, by the one before it); set the returned event to stop watching."""
    stop = threading.Event()

    def calls() -> list[str]:
        frame, out = sys._current_frames().get(threading.main_thread().ident), []
        while frame is not None:
            out.append(frame.f_code.co_name)
            frame = frame.f_back
        return out[::-1]

    def watch():
        while not stop.wait(0.001):
            remaining = iter(calls())
            if all(name in remaining for name in names):
                action()
                return

    threading.Thread(target=watch, daemon=True).start()
    return stop


def test_drain_releases_collects_while_another_thread_collects(case):
    # CPython collects in one thread at a time: gc.collect() returns at once, collecting
    # nothing, while another thread's collection runs (an in-process cluster's threads,
    # the client's event loop). Here one stays open until drain_releases waits for it.
    inside, go_on = threading.Event(), threading.Event()

    class HoldsItsCollectionOpen:
        def __del__(self):  # finalized inside the collection that found it
            if threading.current_thread() is collector:
                inside.set()
                go_on.wait(60)

    def collect():
        while not inside.is_set():
            held = HoldsItsCollectionOpen()
            held.cycle = held
            del held
            gc.collect()

    collector = threading.Thread(target=collect, daemon=True)
    collector.start()
    stop = when_calling(["drain_releases", "collect_garbage"], go_on.set)
    try:
        assert inside.wait(60)
        alloc_id = only_in_a_cycle(case)  # after that collection looked for garbage
        assert drain_releases(client=case.client)
        assert alloc_id not in [a.alloc_id for a in dgvm.table(client=case.client)]
    finally:
        stop.set()
        go_on.set()
        collector.join(60)


def test_drain_releases_lets_the_event_loop_drop_what_it_holds_first(case):
    # The error of a call that just failed can still be held on the client's event loop,
    # by the callback that delivered it, when the caller goes on (and with it the arrays
    # its traceback's frames hold). Here a callback holds an array's cycle until
    # drain_releases waits for a turn of the loop.
    holding, go_on = threading.Event(), threading.Event()

    def hold(held):
        holding.set()
        go_on.wait(60)

    x = dnp.ones(4096, chunks=1024, client=case.client)
    alloc_id = x.alloc_id
    cycle = [x]
    cycle.append(cycle)
    case.client.loop.add_callback(hold, cycle)
    del x, cycle
    stop = when_calling(["drain_releases", "sync"], go_on.set)
    try:
        assert holding.wait(60)
        assert drain_releases(client=case.client)
        go_on.set()  # set already, unless drain_releases never waited for the loop
        assert alloc_id not in [a.alloc_id for a in dgvm.table(client=case.client)]
    finally:
        stop.set()
        go_on.set()
