"""What first-touching fresh memory costs on this machine: numpy arrays with numpy's default
transparent-huge-page advice (madvise(MADV_HUGEPAGE) on arrays of 4 MiB or more), the same with
`NUMPY_MADVISE_HUGEPAGE=0`, and anonymous mmap (4 KiB pages). Why spark-submit.sh turns the
advice off and why the job reuses its large buffers (compaction/kernels/buffers.py).

    .venv/bin/python bench/fresh_memory.py [--mib 512]

Each variant runs in a fresh Python process (the advice is read when numpy is imported) and
touches one byte per 4 KiB page of --mib MiB in 64 MiB arrays. Prints wall, CPU and system
seconds and page faults; then, for contrast, the same pages touched again (mapped now: no fault)
and the speed of writing every byte of them, which is the memory's own bandwidth. On a VM the
first touch also costs the hypervisor's work of backing the page: where that is slow (a "slow
window" of bench/vs_kafka.py) the first touch costs many times the bandwidth's time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = r"""
import mmap, resource, sys, time
import numpy as np
mib, kind = int(sys.argv[1]), sys.argv[2]
u0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
keep = []
for _ in range(mib // 64):
    a = np.empty(64 << 20, np.uint8) if kind == "numpy" else np.frombuffer(mmap.mmap(-1, 64 << 20), np.uint8)
    a[::4096] = 1
    keep.append(a)
u1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = u1.ru_utime - u0.ru_utime + u1.ru_stime - u0.ru_stime
wall = time.perf_counter() - t
t = time.perf_counter()
for a in keep:
    a[::4096] = 2
again = time.perf_counter() - t
t = time.perf_counter()
for a in keep:
    a.fill(3)
fill = time.perf_counter() - t
print(f"{wall:.2f} {cpu:.2f} {u1.ru_stime - u0.ru_stime:.2f} {u1.ru_minflt - u0.ru_minflt} {again:.3f} {fill:.3f}")
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=512)
    args = ap.parse_args()
    variants = (
        ("numpy, huge-page advice (numpy's default)", "numpy", None),
        ("numpy, NUMPY_MADVISE_HUGEPAGE=0", "numpy", "0"),
        ("anonymous mmap, 4 KiB pages", "mmap", None),
    )
    print(f"first touch of {args.mib} MiB of fresh memory, one byte per 4 KiB page:")
    for label, kind, advice in variants:
        env = dict(os.environ)
        env.pop("NUMPY_MADVISE_HUGEPAGE", None)
        if advice is not None:
            env["NUMPY_MADVISE_HUGEPAGE"] = advice
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(args.mib), kind],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        wall, cpu, system, faults, again, fill = (float(v) for v in out)
        print(
            f"  {label:45s} wall {wall:5.2f} s  CPU {cpu:5.2f} s  system {system:5.2f} s  {faults:,.0f} faults "
            f"({system / args.mib * 1024:.2f} s system per GiB); the same pages again {again:.3f} s, "
            f"every byte of them written {args.mib / 1024 / fill:.1f} GiB/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
