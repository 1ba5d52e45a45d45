"""What every example shares: its command line and the cluster it runs on."""

from __future__ import annotations

import argparse
import contextlib

import dgvm


def parser(doc: str, **sizes) -> argparse.ArgumentParser:
    """The command line of an example: the cluster's options, then its sizes with their
    defaults (``--help`` prints them, so the docstring need not repeat them)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--scheduler", help="attach to this scheduler instead of starting a local cluster")
    p.add_argument("--backend", default=None, help="auto, cuda or cpu (None: the dgvm.backend setting)")
    p.add_argument("--workers", type=int, default=2, help="local cluster: number of workers")
    p.add_argument("--device-memory", default=None, help="local cluster: memory per worker, e.g. 2GiB")
    for name, default in sizes.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=default, help=name)
    return p


def parse(doc: str, **sizes) -> argparse.Namespace:
    return parser(doc, **sizes).parse_args()


@contextlib.contextmanager
def cluster(args):
    """A client on ``--scheduler``, or on a local cluster that closes afterwards."""
    if args.scheduler:
        client = dgvm.connect(args.scheduler)
    else:
        kw = {"n_workers": args.workers, "backend": args.backend}
        if args.device_memory:
            kw["device_memory"] = args.device_memory
        client = dgvm.connect(**kw)
    try:
        yield client
    finally:
        client.close()


def check(name: str, error: float, tol: float) -> None:
    print(f"{name}: max |dgvm - numpy| = {error:.3g} ({'OK' if error <= tol else 'WRONG'})")
    if error > tol:
        raise SystemExit(1)
