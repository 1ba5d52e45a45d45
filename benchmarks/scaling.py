"""Weak scaling on 1, 2 and 4 GPUs: dgvm.array beside dask.array and single-GPU CuPy.

    python benchmarks/scaling.py [--backend auto|cuda|cpu] [--gpus 1,2,4] [--per-gpu-gib G]
                                 [--per-gpu-mib M] [--reps 3] [--workloads stencil,CG,...] [--skip-dask]

Three workloads, each written once as a function of a NumPy-like namespace ``xp`` and run
on ``dgvm.array``, on ``dask.array`` (CuPy blocks on ``cuda``, NumPy on ``cpu``) and on CuPy
(NumPy on ``cpu``) on one device:

- stencil: 20 Jacobi steps of the 5-point average on a 2-D float64 grid, written with views,
  ``v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])``,
  between two grids (the edges stay zero);
- CG: 10 conjugate gradient iterations on the shifted 2-D Laplacian (a banded SPD matrix,
  applied matrix-free through the same shifted views), two dot products per iteration;
- Black-Scholes: call and put prices of float64 options (log, sqrt, exp; the normal CDF by
  Abramowitz & Stegun 7.1.26, as ``dgvm.array`` has no ``erf``).

Weak scaling: every array holds the same bytes per GPU (``--per-gpu-gib``; default on
``cuda`` 4 GiB, or less where 12 such arrays do not fit a GPU's memory less dgvm's
placement headroom; 8 MiB on ``cpu``), in one chunk per GPU (a band of grid rows, a piece
of the option vector). For each GPU count of ``--gpus`` (those beyond the GPUs found are
left out) a dgvm cluster of that many workers runs the three workloads, then a plain
``LocalCUDACluster`` of as many (``distributed.LocalCluster`` of processes on ``cpu``) runs
them with dask.array; CuPy runs them first, on one GPU, at the one-GPU size. Each time is
the median of ``--reps`` runs after a warm-up, per iteration (a step, an iteration, a
pricing), to the end of the device work. Printed: the times, weak-scaling efficiency
t(1)/t(n), dask/dgvm and CuPy/dgvm (the speedup of dgvm over each), dgvm's bandwidth at
the least traffic an iteration needs beside what the workers measured, and the issue's
targets. After the timed runs each library runs each workload once more from its start,
and dgvm's result (a sum and a strided sample taking the first row of every chunk) is
compared with dask.array's and, on one GPU, with CuPy's: a wrong answer fails the run.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import logging
import math
import platform
import sys
from typing import Callable

import numpy as np

import dgvm
import dgvm.array as dnp
from timing import array_module, finish_device_work, fresh, median_time, on_device  # benchmarks/timing.py

STEPS, CG_ITERS = 20, 10
SHIFT = 0.5  # the Laplacian's diagonal shift: 4 + SHIFT, well conditioned
# The least each iteration must read and write, in arrays of the workload's size: a step
# reads u and writes v; a CG iteration moves 14 (matvec 2, p.q 2, x and r 3 each, r.r 1,
# p 3); a pricing reads 3 inputs and writes 2 results.
TRAFFIC = {"stencil": 2, "CG": 14, "Black-Scholes": 5}
TARGETS = {"stencil": 0.95, "CG": 0.85, "Black-Scholes": 0.97}  # weak-scaling efficiency at 4 GPUs
DASK_TARGET = {"stencil": 3.0, "CG": 3.0}  # dgvm at least this many times faster than dask.array
CUPY_TARGET = 0.9  # on one GPU, dgvm at least this fraction of CuPy's speed
ARRAYS = 12  # the most arrays of the per-GPU size a GPU holds at once (CuPy's temporaries too)
RTOL = 1e-6


@dataclasses.dataclass
class Lib:
    """One array library as the workloads use it."""

    name: str
    xp: object  # the NumPy-like namespace the workloads call
    chunked: bool  # its creation functions take chunks=
    place: Callable  # an input made ready: on its device, computed
    finish: Callable  # block until these arrays are computed (the clock stops there)
    host: Callable  # an array's values as NumPy
    # An array read by more than one later expression, computed now, once (dgvm: persist;
    # a deferred dgvm tree is computed again by each expression that reads it).
    keep: Callable = lambda a: a
    fork: Callable = lambda a: a  # a handle to write into that leaves the original as it is
    release: Callable = lambda: None  # give back what the dropped arrays held
    layout: Callable = lambda a: []  # blocks per worker of a distributed array

    def kw(self, chunks):
        return {"chunks": chunks} if self.chunked else {}


# --- the workloads: setup(lib, n, rows, cols) -> state; run(lib, state) does ITERS[name]
# iterations and returns its results ---

def grid(lib, n, rows, cols):
    """n bands of ``rows`` x ``cols``: zero edges; inside, a wave along the rows (a few rows
    a period, so that a wrong read of a neighbouring band's row shows) times a ramp."""
    xp, m = lib.xp, n * rows - 2
    u = xp.zeros((n * rows, cols), **lib.kw((rows, cols)))
    u[1:-1, 1:-1] = ((2.0 + xp.cos(xp.linspace(0.0, 0.5 * m, m, **lib.kw(rows))))[:, None]
                     * xp.linspace(0.5, 1.5, cols - 2, **lib.kw(cols)))
    return u


def stencil_setup(lib, n, rows, cols):
    return lib.place(grid(lib, n, rows, cols)), lib.place(grid(lib, n, rows, cols))


def stencil_run(lib, state, iters=STEPS):
    # dgvm and CuPy write in place; the next run goes on from where this one stopped
    u, v = map(lib.fork, state)
    for _ in range(iters):
        v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        u, v = v, u
    return (u,)


def cg_setup(lib, n, rows, cols):
    b = lib.place(grid(lib, n, rows, cols))
    return b, lib.place(lib.xp.zeros_like(b))


def laplacian_into(q, p):
    """q = A p inside (A: the 5-point Laplacian shifted by SHIFT); q's edges stay zero."""
    q[1:-1, 1:-1] = ((4.0 + SHIFT) * p[1:-1, 1:-1]
                     - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:])


def cg_run(lib, state, iters=CG_ITERS):
    b, q = state
    q = lib.fork(q)
    x, r, p = lib.xp.zeros_like(b), b, b
    rr = (r * r).sum()
    for _ in range(iters):
        laplacian_into(q, p)
        alpha = rr / (p * q).sum()
        x = lib.keep(x + alpha * p)  # carried: a dgvm tree would grow across iterations
        r = lib.keep(r - alpha * q)
        rr_new = (r * r).sum()
        p = lib.keep(r + (rr_new / rr) * p)
        rr = rr_new
    return (x,)


def normal_cdf(xp, x):
    # Abramowitz & Stegun 7.1.26 for erf (|error| < 1.5e-7): dgvm.array has no erf.
    z = xp.abs(x) * (1.0 / math.sqrt(2.0))
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * xp.exp(-z * z)
    return 0.5 * (1.0 + xp.where(x >= 0, erf, -erf))


def bs_setup(lib, n, rows, cols):
    xp, m = lib.xp, n * rows * cols
    return tuple(lib.place(xp.linspace(lo, hi, m, **lib.kw(rows * cols)))
                 for lo, hi in ((10.0, 50.0), (40.0, 10.0), (0.25, 2.0)))


def bs_run(lib, state, rate=0.02, vol=0.3):
    xp, (price, strike, years), keep = lib.xp, state, lib.keep
    sd = keep(vol * xp.sqrt(years))  # each is read twice below
    d1 = keep((xp.log(price / strike) + (rate + 0.5 * vol * vol) * years) / sd)
    d2 = keep(d1 - sd)
    discounted = keep(strike * xp.exp(-rate * years))
    call = price * normal_cdf(xp, d1) - discounted * normal_cdf(xp, d2)
    put = discounted * normal_cdf(xp, -d2) - price * normal_cdf(xp, -d1)
    return call, put


WORKLOADS = {"stencil": (stencil_setup, stencil_run), "CG": (cg_setup, cg_run),
             "Black-Scholes": (bs_setup, bs_run)}
ITERS = {"stencil": STEPS, "CG": CG_ITERS, "Black-Scholes": 1}


def summary(lib, results, rows, cols):
    """A sum and a strided sample of each result, as NumPy: the sample takes the first
    row (element) of every chunk."""
    out = []
    for a in results:
        sample = a[:: max(1, rows // 8), :: max(1, cols // 8)] if a.ndim == 2 else a[:: max(1, rows * cols // 64)]
        out += [np.ravel(lib.host(sample)), [float(lib.host(a.sum()))]]
    return np.concatenate(out)


def time_workloads(lib, n, rows, cols, reps, label):
    """Seconds per iteration of each workload on ``lib`` and its result's summary."""
    times, sums, layouts = {}, {}, {}
    for name, (setup, run) in WORKLOADS.items():
        state = setup(lib, n, rows, cols)
        layouts[name] = lib.layout(state[0])
        times[name] = median_time(lambda: lib.finish(run(lib, state)), reps, f"{label} {name}") / ITERS[name]
        del state
        lib.release()
        state = setup(lib, n, rows, cols)  # once more from the start, to check
        results = run(lib, state)
        lib.finish(results)
        sums[name] = summary(lib, results, rows, cols)
        del state, results
        lib.release()
    if any(layouts.values()):
        print(f"{label}: blocks per worker of the first input, " + ", ".join(f"{k} {v}" for k, v in layouts.items()))
    return times, sums


# --- the libraries ---

def dgvm_lib(backend):
    def finish(arrays):
        for a in arrays:
            a.persist()  # all queued before the first wait
        for a in arrays:
            a.wait()

    def release():
        from dgvm.array._engine.lifecycle import drain_releases

        drain_releases()

    return Lib("dgvm", dnp, True, place=lambda a: a.wait(), finish=finish, host=dnp.asnumpy,
               keep=lambda a: a.persist(), release=release,
               layout=lambda a: sorted(collections.Counter(a.locations().values()).values()))


def dask_lib(client, backend):
    import dask.array as da
    from distributed import wait

    mod = array_module(backend)

    def place(a):
        a = a.map_blocks(on_device, backend=backend, dtype=a.dtype).persist()
        wait(a)
        return a

    def finish(arrays):
        wait(client.persist([fresh(a) for a in arrays]))
        finish_device_work(client, backend)

    def host(a):
        return np.asarray(mod.asnumpy(a.compute()) if mod is not np else a.compute())

    # A dask.array written through a view gets a new graph: the run writes a new handle.
    def layout(a):  # Dask puts blocks where it decides
        return sorted(collections.Counter(w for ws in client.who_has(a).values() for w in ws).values())

    return Lib("dask", da, True, place=place, finish=finish, host=host, fork=lambda a: a.copy(), layout=layout)


def single_lib(backend):
    mod = array_module(backend)

    def finish(arrays):
        if mod is not np:
            mod.cuda.Device().synchronize()

    def release():
        if mod is not np:
            mod.get_default_memory_pool().free_all_blocks()

    return Lib("CuPy" if mod is not np else "NumPy", mod, False, place=lambda a: a, finish=finish,
               host=lambda a: mod.asnumpy(a) if mod is not np else np.asarray(a), release=release)


def dask_cluster(backend, n):
    """The peer's cluster: dask-cuda's on cuda, Dask's processes on cpu, one thread a worker."""
    if backend == "cuda":
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(n_workers=n, threads_per_worker=1, dashboard_address=":0")
    from distributed import LocalCluster

    return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0")


# --- sizes and the machine ---

def default_per_gpu(backend) -> int:
    """Bytes of each array per GPU: 8 MiB on cpu; on cuda 4 GiB, or what lets ARRAYS fit."""
    if backend != "cuda":
        return 8 << 20
    import cupy

    from dgvm import config

    total = cupy.cuda.runtime.memGetInfo()[1]
    room = total * (1.0 - float(config.get("placement.headroom")))
    return min(4 << 30, int(room / ARRAYS) >> 20 << 20)


def shape_per_gpu(nbytes: int) -> tuple[int, int]:
    """(rows, cols) of float64 near nbytes, near square: cols a multiple of 64, rows of 8."""
    elements = max(nbytes // 8, 64 * 64)
    cols = max(64, round(math.sqrt(elements) / 64) * 64)
    return max(8, elements // cols // 8 * 8), cols


def devices_found(backend) -> tuple[int, str]:
    if backend != "cuda":
        return sys.maxsize, platform.processor() or platform.machine()
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return cupy.cuda.runtime.getDeviceCount(), name.decode() if isinstance(name, bytes) else name


def report(counts, rows, cols, mine, theirs, single, bandwidth, unit):
    nbytes = 8 * rows * cols
    print(f"\n{'workload':<14} {unit:>4} {'dgvm s/it':>10} {'eff':>5} {'dask s/it':>10} {'eff':>5} "
          f"{'dask/dgvm':>9} {'1-dev s/it':>10} {'1-dev/dgvm':>10} {'dgvm GB/s':>9} {'of measured':>11}")
    for name in WORKLOADS:
        for n in counts:
            t, d = mine[n][name], theirs[n][name]
            moved = TRAFFIC[name] * n * nbytes
            line = (f"{name:<14} {n:>4} {t:>10.5f} {mine[counts[0]][name] / t:>5.0%} {d:>10.5f} "
                    f"{theirs[counts[0]][name] / d:>5.0%} {d / t:>8.1f}x")
            s = single.get(name) if n == 1 else None
            line += f" {s:>10.5f} {s / t:>9.2f}x" if s else f" {'-':>10} {'-':>10}"
            print(line + f" {moved / t / 1e9:>9.1f} {moved / t / bandwidth[n]:>11.0%}")
    top = counts[-1]
    note = "" if unit == "GPUs" else "; the targets are the GPUs', cpu times say nothing of them"
    print(f"\ntargets (weak-scaling efficiency at 4 {unit}; measured here at {top}{note}):")
    for name in WORKLOADS:
        eff = mine[counts[0]][name] / mine[top][name]
        parts = [f"efficiency {eff:.0%} (target >= {TARGETS[name]:.0%}: {'met' if eff >= TARGETS[name] else 'MISSED'})"]
        if name in DASK_TARGET:
            ratio = min(theirs[n][name] / mine[n][name] for n in counts)
            parts.append(f"dask/dgvm at least {ratio:.1f}x (target >= {DASK_TARGET[name]:.0f}x: "
                         f"{'met' if ratio >= DASK_TARGET[name] else 'MISSED'})")
        if name in single and 1 in counts:
            ratio = single[name] / mine[1][name]
            parts.append(f"1-device/dgvm {ratio:.2f}x (target >= {CUPY_TARGET}x: "
                         f"{'met' if ratio >= CUPY_TARGET else 'MISSED'})")
        print(f"  {name}: " + "; ".join(parts))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--gpus", default=None, help="GPU (worker) counts, e.g. 1,2,4 (default: 1,2,4 on cuda, 1,2 on cpu)")
    p.add_argument("--per-gpu-gib", type=float, default=None, help="bytes of each array per GPU, in GiB")
    p.add_argument("--per-gpu-mib", type=float, default=None, help="the same in MiB (small cpu runs)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workloads", default=None, help=f"some of {','.join(WORKLOADS)} (default: all)")
    p.add_argument("--skip-dask", action="store_true", help="leave dask.array out (dgvm and the single device only)")
    args = p.parse_args(argv)
    if args.workloads:
        chosen = args.workloads.split(",")
        unknown = set(chosen) - set(WORKLOADS)
        if unknown:
            raise SystemExit(f"unknown workloads {sorted(unknown)}: choose from {', '.join(WORKLOADS)}")
        for name in list(WORKLOADS):
            if name not in chosen:
                del WORKLOADS[name]
    logging.getLogger("distributed").setLevel(logging.ERROR)
    from distributed import Client

    from dgvm import backends

    backend = backends.resolve(args.backend)
    found, device = devices_found(backend)
    asked = [int(c) for c in (args.gpus or ("1,2,4" if backend == "cuda" else "1,2")).split(",")]
    counts = sorted(c for c in set(asked) if c <= found)
    if not counts:
        raise SystemExit(f"none of the counts {asked} fits the {found} GPUs found")
    if args.per_gpu_gib is not None or args.per_gpu_mib is not None:
        per_gpu = int((args.per_gpu_gib or 0) * 2**30 + (args.per_gpu_mib or 0) * 2**20)
    else:
        per_gpu = default_per_gpu(backend)
    rows, cols = shape_per_gpu(per_gpu)
    nbytes = 8 * rows * cols
    unit = "GPUs" if backend == "cuda" else "devs"
    print(f"command: python {' '.join(sys.argv)}")
    print(f"backend {backend}, device {device}" + (f" x {found} found" if backend == "cuda" else "")
          + f"; {unit} {counts}" + (f" (left out: {sorted(set(asked) - set(counts))})" if set(asked) - set(counts) else ""))
    print(f"per {unit[:-1]} and array: {rows} x {cols} float64 ({nbytes / 2**20:.0f} MiB; the grid is "
          f"n*{rows} x {cols}, the options n*{rows * cols}); {args.reps} reps after a warm-up")

    single_times, single_sums = {}, {}
    if 1 in counts:
        single = single_lib(backend)
        single_times, single_sums = time_workloads(single, 1, rows, cols, args.reps, single.name)
    mine, theirs, bandwidth = {}, {}, {}
    kw = {} if backend == "cuda" else {"device_memory": f"{(ARRAYS + 4) * nbytes // 2**20 + 64}MiB"}
    for n in counts:
        client = dgvm.connect(n_workers=n, backend=backend, dashboard_address=":0", **kw)
        try:
            bandwidth[n] = sum(w.bandwidth for w in dgvm.workers())
            mine[n], dgvm_sums = time_workloads(dgvm_lib(backend), n, rows, cols, args.reps, f"dgvm x{n}")
        finally:
            client.close()
        print(f"{n} {unit}: dgvm {', '.join(f'{k} {v:.5f}' for k, v in mine[n].items())} s/it", flush=True)
        if args.skip_dask:
            theirs[n], dask_sums = {name: math.nan for name in WORKLOADS}, dgvm_sums
        else:
            with dask_cluster(backend, n) as cluster, Client(cluster, set_as_default=True) as client:
                theirs[n], dask_sums = time_workloads(dask_lib(client, backend), n, rows, cols, args.reps, f"dask x{n}")
        for name in WORKLOADS:  # a wrong answer fails the run
            np.testing.assert_allclose(dgvm_sums[name], dask_sums[name], rtol=RTOL,
                                       err_msg=f"{name} on {n}: dgvm != dask.array")
            if n == 1 and single_sums:
                np.testing.assert_allclose(dgvm_sums[name], single_sums[name], rtol=RTOL,
                                           err_msg=f"{name}: dgvm != single-device {backend}")
        # (each count as it ends: a run cut short still says what it measured)
        print(f"{n} {unit}: dgvm {', '.join(f'{k} {v:.5f}' for k, v in mine[n].items())} s/it; "
              f"dask.array {', '.join(f'{k} {v:.5f}' for k, v in theirs[n].items())} s/it"
              + (f"; single device {', '.join(f'{k} {v:.5f}' for k, v in single_times.items())} s/it"
                 if n == 1 and single_times else "")
              + ("; dask.array left out" if args.skip_dask else "; results agree with dask.array")
              + (" and the single device" if n == 1 and single_sums else ""),
              flush=True)
    report(counts, rows, cols, mine, theirs, single_times, bandwidth, unit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
