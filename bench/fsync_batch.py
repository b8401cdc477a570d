"""What making a rewrite's files durable costs, file by file against together at the end
(compaction/runtime/durability.py), on the filesystem of DIR.

    .venv/bin/python bench/fsync_batch.py [DIR] [--groups 33] [--log-mib 17] [--repeat 3]

Writes, per group, a `.log.cleaned` of `--log-mib` MiB with O_DIRECT (as `segment_io` does) and
two 40 KB index files through the page cache (as `Storage.write_durable` does), then either fsyncs
each file and the directory as it is closed (the job without a batch), or fsyncs all files from
the job's sync threads and the directory once at the end (`durability.sync`). The defaults are the
shape of a 2 GiB partition cut into 64 MiB groups (`bench/vs_kafka.py --kafka 4 --name w2g`: 33
groups, ~17 MiB of each kept). Prints the wall time and the time spent in fsync of each way,
alternated. Not a test.
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compaction.runtime import durability

INDEX_BYTES = 40_000


def write(path: str, data, direct: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0), 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def one(d: str, groups: int, log, index: bytes, together: bool) -> tuple[float, float]:
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.sync()
    started, in_sync, paths = time.perf_counter(), 0.0, []
    for g in range(groups):
        files = [(f"{d}/{g:020d}.log.cleaned", log, True)]
        files += [(f"{d}/{g:020d}{suffix}.cleaned", index, False) for suffix in (".index", ".timeindex")]
        for path, data, direct in files:
            write(path, data, direct)
            paths.append(path)
            if not together:
                t = time.perf_counter()
                durability.fsync_path(path)
                durability.fsync_path(d, os.O_RDONLY | os.O_DIRECTORY)
                in_sync += time.perf_counter() - t
    if together:
        t = time.perf_counter()
        durability.sync(paths)
        in_sync = time.perf_counter() - t
    return time.perf_counter() - started, in_sync


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "dir", nargs="?", type=Path, default=Path(__file__).resolve().parent / "out" / "fsync_batch"
    )
    ap.add_argument("--groups", type=int, default=33)
    ap.add_argument("--log-mib", type=int, default=17)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    d = tempfile.mkdtemp(dir=args.dir)
    log = mmap.mmap(-1, args.log_mib << 20)  # page-aligned, as O_DIRECT needs
    log.write(os.urandom(1 << 20) * args.log_mib)
    index = os.urandom(INDEX_BYTES)
    print(f"{args.groups} groups of a {args.log_mib} MiB log and two {INDEX_BYTES:,} B indexes, in {d}")
    for i in range(args.repeat):
        each = one(d, args.groups, log, index, together=False)
        end = one(d, args.groups, log, index, together=True)
        print(
            f"run {i + 1}: file by file {each[0]:.3f} s ({each[1]:.3f} s in fsync) | together at the end "
            f"{end[0]:.3f} s ({end[1]:.3f} s in fsync)",
            flush=True,
        )
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)


if __name__ == "__main__":
    main()
