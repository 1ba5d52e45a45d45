"""Which workers share a host: the same-host paths (CUDA IPC, shared memory) compare it.

A worker's host is its hostname and a key of what memory sharing needs: the machine's boot
(``/proc/sys/kernel/random/boot_id``), its network namespace (``/proc/self/ns/net``) and
the shared-memory filesystem it sees (``/dev/shm``). Neither a hostname nor an address is
enough alone: two machines may show the same contact address (a NAT, an ssh tunnel) or
hostname, and containers on one machine with the host's network keep /dev/shm of their
own. A network namespace is a host of its own, as a container is: its workers reach the
others over the network, as on another machine.
"""

from __future__ import annotations

import hashlib
import os
import socket

BOOT_ID = "/proc/sys/kernel/random/boot_id"
NET_NAMESPACE = "/proc/self/ns/net"
SHARED_MEMORY = "/dev/shm"


def _parts() -> list[str]:
    parts = []
    try:
        with open(BOOT_ID) as f:
            parts.append(f.read().strip())
    except OSError:
        pass
    try:
        parts.append(os.readlink(NET_NAMESPACE))  # "net:[4026531840]"
    except OSError:
        pass
    try:
        parts.append(f"shm:{os.stat(SHARED_MEMORY).st_dev}")  # one tmpfs mount, one device
    except OSError:
        pass
    return parts


def host_id(address_host: str) -> str:
    """This process's host as the same-host paths compare it: ``"hostname/key"``. Where
    the system tells none of the parts (not Linux), the key is ``address_host``, the host
    part of the worker's address."""
    parts = _parts()
    key = hashlib.sha1("\n".join(parts).encode()).hexdigest()[:12] if parts else address_host
    return f"{socket.gethostname()}/{key}"
