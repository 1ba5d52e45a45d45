"""Send Dask's batched-stream messages at once on a dgvm cluster.

Dask's client, scheduler and workers talk over batched streams that hold each message
for a few milliseconds (client 10 ms, scheduler to workers 5 ms, to clients and worker to
scheduler 2 ms) to group the many small messages of task graphs. A dgvm operation sends a
handful of messages (one task per worker, its completion) and waits for them, so each
hold is added to its latency: measured on 2 local workers, a no-op Dask round trip took
17 ms with Dask's intervals and 6.6 ms with none (``benchmarks/overhead.py``).
``dgvm.dispatch.batch-interval`` (default ``0ms``; null keeps Dask's) sets the hold of the
streams each process sends on: the client's (``dgvm.connect``), the scheduler's
(the GVAT plugin) and the workers' (the chunk-store plugin). Messages that arrive while a stream is writing
still go out together.
"""

from __future__ import annotations

from dgvm import config



def tell(stream, message: dict) -> bool:
    """Send ``message`` on a batched stream; False if there is none or it is closing (its
    worker is leaving: nothing to tell it any more)."""
    if stream is None:
        return False
    try:
        stream.send(message)
    except Exception:  # noqa: BLE001  (CommClosedError, or a stream already closed)
        return False
    return True


def interval() -> float | None:
    """The configured hold in seconds, or None to keep Dask's."""
    return config.get_seconds("dispatch.batch-interval")


def tune(stream) -> None:
    """Set the hold of one ``distributed.batched.BatchedSend``."""
    seconds = interval()
    if stream is not None and seconds is not None:
        stream.interval = seconds


def send_small(stream, message: dict) -> None:
    """(On the loop.) Send ``message``, a task's report, on a worker's stream to the
    scheduler: its comm serializes (and reads) messages on the loop without Dask's walk of
    each one's size first, which decides whether to do it on a thread and costs more than
    the serializing of the small messages this comm carries each operation (reports, task
    completions; a message above Dask's offload threshold, 10 MiB, would hold the loop
    while it is serialized). Set here, where the stream's comm is known: it is made after
    the plugin starts, and again when the scheduler comes back."""
    comm = stream.comm
    if comm is not None and comm.allow_offload:
        comm.allow_offload = False
    stream.send(message)
