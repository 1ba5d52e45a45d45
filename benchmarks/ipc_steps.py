"""Where a CUDA IPC chunk move spends its time, step by step (needs 2 GPUs).

    python benchmarks/ipc_steps.py

A holder process makes 4 allocations on GPU 0 and exports their IPC handles; this process,
on GPU 1, times for each: cudaMalloc of the destination, cudaIpcOpenMemHandle, the first
and second device-to-device copy, an async copy on its own stream, and the handle's close.
These are the steps of dgvm's ``cuda_ipc`` fetch, without dgvm's requests around them.
"""

import multiprocessing as mp, time
def holder(q, r, n):
    import cupy
    cupy.cuda.Device(0).use()
    mems = [cupy.cuda.Memory(n) for _ in range(4)]
    q.put([bytes(cupy.cuda.runtime.ipcGetMemHandle(m.ptr)) for m in mems])
    r.get()
def main():
    import cupy
    ctx = mp.get_context("spawn")
    for n in (64 << 20, 256 << 20, 1 << 30):
        q, r = ctx.Queue(), ctx.Queue()
        p = ctx.Process(target=holder, args=(q, r, n)); p.start()
        handles = q.get()
        cupy.cuda.Device(1).use()
        rt = cupy.cuda.runtime
        try: rt.deviceEnablePeerAccess(0)
        except Exception as e: print("peer", e)
        for k, h in enumerate(handles):
            t0 = time.perf_counter(); dst = cupy.cuda.Memory(n); rt.deviceSynchronize(); t1 = time.perf_counter()
            src = rt.ipcOpenMemHandle(h, rt.cudaIpcMemLazyEnablePeerAccess); t2 = time.perf_counter()
            rt.memcpy(dst.ptr, src, n, rt.memcpyDeviceToDevice); rt.deviceSynchronize(); t3 = time.perf_counter()
            rt.memcpy(dst.ptr, src, n, rt.memcpyDeviceToDevice); rt.deviceSynchronize(); t4 = time.perf_counter()
            s = cupy.cuda.Stream(non_blocking=True)
            with s:
                rt.memcpyAsync(dst.ptr, src, n, rt.memcpyDeviceToDevice, s.ptr); s.synchronize()
            t5 = time.perf_counter()
            rt.ipcCloseMemHandle(src); t6 = time.perf_counter()
            print(f"{n>>20} MiB #{k}: malloc {1e3*(t1-t0):.2f} ms open {1e3*(t2-t1):.2f} copy1 {1e3*(t3-t2):.2f} ({n/(t3-t2)/1e9:.0f} GB/s) copy2 {n/(t4-t3)/1e9:.0f} GB/s async {n/(t5-t4)/1e9:.0f} GB/s close {1e3*(t6-t5):.2f}")
            del dst
        r.put(1); p.join()
if __name__ == "__main__":
    main()
