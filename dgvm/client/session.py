"""The user process's link to a dgvm cluster: connect, and call the GVAT or a worker.

The user's process needs no GPU: it sends requests to the scheduler's GVAT and moves
bytes straight to and from the workers that hold them.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref

from distributed import Client, default_client

from dgvm import config, dask_compat, streams
from dgvm.client import thread_switch
from dgvm.client.left_workers import LeftWorkers
from dgvm.deploy.cluster import LocalCluster
from dgvm.protocol import messages
from dgvm.protocol.arguments import shown
from dgvm.protocol.errors import ConnectionBroke, DgvmError, InvalidArgumentType, NotConnected


def connect(address=None, **cluster_kwargs) -> Client:
    """Connect to a dgvm cluster and return its ``distributed.Client``.

    - ``connect()`` starts a ``dgvm.LocalCluster(**cluster_kwargs)`` and connects to it;
    - ``connect(cluster)`` connects to a running cluster object;
    - ``connect("tcp://host:8786")`` attaches to a running scheduler. If it was started
      without the dgvm preloads, the plugins are installed on it and its workers now.

    The process's thread switch interval becomes ``dgvm.dispatch.switch-interval``
    (``dgvm.client.thread_switch``).
    """
    if address is not None and cluster_kwargs:  # they would be dropped unsaid
        raise InvalidArgumentType(
            f"connect(address) attaches to a running cluster and takes no cluster arguments; "
            f"got {', '.join(sorted(cluster_kwargs))}"
        )
    if address is not None and not isinstance(address, str) and not hasattr(address, "scheduler_address"):
        raise InvalidArgumentType(
            f"address must be a scheduler address ('tcp://host:8786') or a cluster object, got {shown(address)}"
        )
    if address is None:
        cluster = LocalCluster(**cluster_kwargs)  # checks the configuration first
        client = Client(cluster, set_as_default=True)
        # Close the cluster with the client, as Client() does for a cluster it started.
        dask_compat.close_cluster_with_client(client)
    else:
        config.validate()
        client = attach(address, set_as_default=True)
    ensure_plugins(client)
    streams.tune(client.scheduler_comm)
    thread_switch.shorten()
    return client


def attach(address: str, set_as_default: bool = False) -> Client:
    """A client of the scheduler at ``address``; ``NotConnected`` naming it when none
    answers within ``dgvm.connect-timeout`` (refused, unreachable, or not a scheduler)."""
    timeout = config.get_seconds("connect-timeout")
    try:
        return Client(address, timeout=timeout, set_as_default=set_as_default)
    except (OSError, TimeoutError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise NotConnected(
            f"no dgvm scheduler answered at {address} within {timeout:g} s ({reason}): check the "
            "address and port, and that a scheduler runs there (dgvm scheduler, or dask "
            "scheduler --preload dgvm.scheduler); dgvm.connect-timeout sets the wait"
        ) from None


def ensure_plugins(client: Client, timeout: float = 30) -> None:
    """Install the GVAT and chunk-store plugins where the cluster lacks them."""
    # The scheduler's and workers' sides load in the program's process only to be sent to a
    # cluster started without the preloads: importing the scheduler plugin lists the
    # dashboard's routes for every scheduler this process starts (dgvm.dashboard.mount).
    from dgvm.scheduler.plugin import GVATPlugin
    from dgvm.worker.plugin import StoreInstaller

    gvat, store = messages.GVAT_PLUGIN, messages.EXTENSION  # travel with the functions

    def has_gvat(dask_scheduler=None):
        return gvat in dask_scheduler.plugins

    if not client.run_on_scheduler(has_gvat):
        client.register_plugin(GVATPlugin())

    def has_store(dask_worker=None):
        return store in dask_worker.extensions

    missing = [w for w, ok in client.run(has_store).items() if not ok]
    if missing:  # (the workers that have a store keep it, chunks and all: ``StoreInstaller``)
        client.register_plugin(StoreInstaller())
        # The GVAT learns of new stores from worker heartbeats: wait for the next ones.
        deadline = time.monotonic() + timeout
        while True:
            known = {w.address for w in call_scheduler(messages.WORKERS, client)}
            if known >= set(missing):
                break
            if time.monotonic() > deadline:
                raise DgvmError(
                    f"chunk stores on {sorted(set(missing) - known)} did not report to the "
                    f"GVAT within {timeout} s"
                )
            time.sleep(0.1)


class Session:
    """What dgvm keeps in the user's process for one connection (one ``distributed.Client``).

    State a layer above keeps per connection (live allocation handles, the chunks tasks
    touched, arrays' releases, allocations kept for reuse, ...) lives in a part of the
    session, one instance of the part's class per session (``part``), so two clients in
    one process share none of it and a test gets a fresh one with a fresh client. The
    session holds its client weakly: it goes with it."""

    def __init__(self, client: Client):
        self._client = weakref.ref(client)
        self.client_id = client.id
        self._parts: dict[type, object] = {}
        self._lock = threading.RLock()  # a part may use another part when it is made

    @property
    def client(self) -> Client:
        client = self._client()
        if client is None:
            raise NotConnected(f"the client {self.client_id} of this dgvm session is gone")
        return client

    def running(self) -> bool:
        """Whether the session's client is still there and connected (or connecting)."""
        client = self._client()
        return client is not None and client.status in ("running", "connecting", "newly-created")

    def part(self, cls):
        """This session's one instance of ``cls`` (``cls(session)``, made on first use)."""
        with self._lock:
            part = self._parts.get(cls)
            if part is None:
                part = self._parts[cls] = cls(self)
            return part

    def parts(self) -> list:
        with self._lock:
            return list(self._parts.values())


_sessions_lock = threading.Lock()


def session_of(client: Client | None = None) -> Session:
    """The session of ``client`` (default: the current client). It lives among the
    client's extensions, as the plugins' state does on the scheduler and the workers: it
    goes with its client, whatever its parts hold (allocation handles hold the client)."""
    client = client_or_current(client)
    with _sessions_lock:
        s = client.extensions.get(messages.EXTENSION)
        if s is None:
            s = client.extensions[messages.EXTENSION] = Session(client)
        return s


def current_client() -> Client:
    try:
        return default_client()
    except ValueError:
        raise NotConnected(
            "no dgvm cluster is connected: call dgvm.connect() (local cluster) or "
            "dgvm.connect('tcp://scheduler:8786')"
        ) from None


def client_or_current(client) -> Client:
    """``client`` (an argument of the public API), or the current client for None."""
    if client is None:
        return current_client()
    if not isinstance(client, Client):
        raise InvalidArgumentType(f"client must be a distributed.Client (or None), got {shown(client)}")
    return client


def is_closed(client: Client) -> bool:
    """Whether ``client`` was closed (and its arrays' cluster with it, or gone)."""
    return client.status in ("closing", "closed")


def ensure_open(client: Client) -> Client:
    """``client``; ``NotConnected`` if it was closed: every use of an array or buffer of a
    closed cluster says so in one way (not Dask's ClosedClientError or a closed event loop)."""
    if is_closed(client):
        raise NotConnected(
            f"the dgvm cluster of this array or buffer is closed (its client {client.id} was "
            "closed): its memory went with it; connect again (dgvm.connect) and make it anew"
        )
    return client


def call_scheduler(handler: str, client: Client | None = None, **kwargs):
    """Call the GVAT's ``handler`` (a name of ``dgvm.protocol.messages``) and return its
    answer (blocking), decoded: a structured answer as its record, a refusal raised as
    its error (``messages.call``)."""
    client = ensure_open(client_or_current(client))
    return client.sync(messages.call, client.scheduler, handler, **kwargs)


def call_workers(handler: str, requests: dict[str, dict], client: Client | None = None) -> dict:
    """Call ``handler`` on several workers at once: {address: kwargs} -> {address: answer},
    decoded as ``call_scheduler`` does; the first refusal is raised. A request to a worker
    that leaves meanwhile raises ``ConnectionError`` once the GVAT says so; one that a
    closing worker answered raises ``ConnectionBroke`` naming it (the caller asks the GVAT
    whether it left)."""
    client = ensure_open(client_or_current(client))
    peers = session_of(client).part(LeftWorkers).peers

    def gone(address):  # an OSError, as a failed connection is: the caller asks the GVAT
        return ConnectionError(f"worker {address} left the cluster")

    async def ask(address, kwargs):
        try:  # (None, Dask's answer for a handler it lacks: the worker's dgvm store closed)
            return await messages.call(client.rpc(address), handler, required=True, **kwargs)
        except ConnectionBroke as e:  # its own request broke: it may be closing (its pool closed)
            raise ConnectionBroke(str(e) if address in str(e) else f"worker {address}: {e}") from None

    async def _all():
        answers = await asyncio.gather(*(
            peers.call(addr, ask(addr, kw), lambda a=addr: gone(a))
            for addr, kw in requests.items()
        ))
        return dict(zip(requests, answers))

    return client.sync(_all)
