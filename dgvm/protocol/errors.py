"""The exceptions dgvm raises.

Every message says what was asked and what was available, so that the caller can act on
it without reading dgvm's source. Handlers answer most of them as data
(``dgvm.protocol.messages``: ``REFUSALS``), and the caller raises them again.
"""

from __future__ import annotations

import contextlib
import copy


class DgvmError(Exception):
    """Base class of every error dgvm raises on purpose."""


class OutOfDeviceMemory(MemoryError, DgvmError):
    """An allocation does not fit in the free device memory of the cluster."""


class InvalidAddress(ValueError, DgvmError):
    """An address, offset or handle that names no live allocation.

    Raised for unknown addresses, ranges running past an allocation, use after free and
    double free.
    """


class InvalidArgument(ValueError, DgvmError):
    """An argument out of its range (a negative size, NaN, an unknown placement policy);
    the message names the argument, the value and what is allowed. A ``ValueError``."""


class InvalidArgumentType(TypeError, DgvmError):
    """An argument of the wrong type (a string for an offset, a float for a chunk index,
    a bool for a count); the message names the argument and what it takes. A
    ``TypeError``."""


class ConfigError(ValueError, DgvmError):
    """A ``dgvm.*`` configuration value (``dask.config``, a YAML file or a ``DASK_DGVM__…``
    environment variable) that the schema does not allow; the message names the key, the
    value, where it came from and what is allowed."""


class NotConnected(RuntimeError, DgvmError):
    """No Dask client is connected to a cluster with the dgvm plugins."""


class AccessDenied(PermissionError, DgvmError):
    """A request touches an allocation that belongs to another client."""


class NotSupported(NotImplementedError, DgvmError):
    """A form of a NumPy call that dgvm.array does not offer (an ``einsum`` form, a ``pad``
    mode): the message names the form and what is offered instead."""


class ChunkLost(DgvmError):
    """A chunk's home worker left the cluster; its data is gone until recovered."""


class ConnectionBroke(DgvmError):
    """A request a dgvm handler made to another process (the scheduler, a peer worker) lost
    its connection: most often because the process answering is closing (its connections
    close with it), or the peer it asked died. The message names the handler and the
    connection's error."""


class PeerClosing(ConnectionBroke):
    """A peer answered a dgvm request with nothing: it is closing (its dgvm handlers are
    gone), and the scheduler will remove it. Unlike other ``ConnectionBroke`` errors (a
    peer's own request to a third process broke, passed on), news that it left follows."""


def comm_error(error: BaseException) -> bool:
    """Is ``error`` the comm's own (a connection refused, reset or closed), not a refusal
    that an ``OSError`` class carries (``AccessDenied`` is a ``PermissionError``)?"""
    return isinstance(error, OSError) and not isinstance(error, DgvmError)


def peer_leaving(error: BaseException) -> bool:
    """Might the peer a request went to be leaving the cluster, so that news of it is worth
    waiting for (``dgvm.transfer.left_peers``)? Its connection broke (``comm_error``), or
    it is closing (``PeerClosing``); not a refusal, nor a ``ConnectionBroke`` it passed on
    from its own request to another process."""
    return isinstance(error, PeerClosing) or comm_error(error)


def broken_connection(error: BaseException) -> bool:
    """Did a request fail because a connection broke (``comm_error``, or a handler's
    ``ConnectionBroke``), rather than being refused? Waiting for news that the peer left,
    or asking again, would only delay a refusal."""
    return isinstance(error, ConnectionBroke) or comm_error(error)


class KernelError(DgvmError):
    """A kernel failed on a worker; the message names the kernel, chunk and worker and
    carries the original traceback. The failing output chunk keeps its previous contents."""


@contextlib.contextmanager
def detached_task_errors():
    """Raise a failed Dask task's exception as a copy.

    Dask keeps the exception it raises in the future's state, held by the client as long
    as the future is; raised as it is, it would gather the caller's frames on its way up
    (and through them the arrays of the operation, whose pending writes hold the future):
    an array whose task failed could never be freed. The original loses those frames
    (Dask keeps the worker's traceback apart); the copy carries them."""
    try:
        yield
    except Exception as e:
        tb, e.__traceback__ = e.__traceback__, None
        try:
            twin = copy.copy(e)
        except Exception:  # an exception type that cannot be rebuilt from its args
            raise e.with_traceback(tb) from None
        raise twin.with_traceback(tb) from None
