"""How fast the tasks' read path (compaction/runtime/segment_io.py) reads a partition's segments
from the disk, by request size, beside `cat`: one reader over all segments, then N at once, each
over a contiguous share (as the tasks of a partition cut into ranges read them). The page cache is
dropped before each measurement; each reader reads one segment ahead on a thread as a task does.

    .venv/bin/python bench/read_speed.py PARTITION_DIR [--readers 2] [--chunks 16M,1M,128K]
                                         [--mode buffered|direct] [--repeat 2]

Prints MB/s of wall time and each reader's CPU seconds. Needs root for the cache drop (without it
the figures are of the page cache). Not a test.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from e2e import drop_caches, read_speed  # noqa: E402

from compaction.runtime import segment_io  # noqa: E402
from compaction.runtime.storage import Storage  # noqa: E402

UNITS = {"K": 1 << 10, "M": 1 << 20}


def _size(text: str) -> int:
    return int(text[:-1]) * UNITS[text[-1].upper()] if text[-1].upper() in UNITS else int(text)


def _reader(args) -> tuple[int, float, float]:
    paths, mode, chunk = args
    segment_io.READ_CHUNK = segment_io.BUFFERED_CHUNK = chunk
    storage, got = Storage.local(), 0
    wall, cpu = time.perf_counter(), time.process_time()
    with segment_io.ReadAhead(lambda p: segment_io.read_segment_bytes(storage, p, mode), paths) as ahead:
        for i in range(len(paths)):
            data = ahead.get(i)
            got += len(data)
            del data  # its pooled buffer is free again
    return got, time.perf_counter() - wall, time.process_time() - cpu


def _shares(paths: list[str], n: int) -> list[list[str]]:
    return [paths[i * len(paths) // n : (i + 1) * len(paths) // n] for i in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", type=Path)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--chunks", default="16M,1M,128K", help="request sizes to compare, comma-separated")
    ap.add_argument("--mode", choices=("buffered", "direct"), default="buffered")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    files = sorted(args.part.glob("*.log"))[:-1]  # the active segment is never cleaned
    paths = [str(f) for f in files]
    total = sum(f.stat().st_size for f in files)
    print(f"{args.part}: {len(files)} segments, {total / 1e6:,.0f} MB, {args.mode} reads")
    segment_io.configure(0, 1 << 62)  # every segment read as the scan reads it
    for r in range(args.repeat):
        for readers in (1, args.readers):
            speed, cold = read_speed(files, readers)
            print(
                f"run {r + 1}, {readers} reader(s): cat {speed / 1e6:,.0f} MB/s{'' if cold else ' (cache not dropped)'}"
            )
            for chunk in args.chunks.split(","):
                drop_caches()
                t = time.perf_counter()
                with multiprocessing.get_context("fork").Pool(readers) as pool:
                    got = pool.map(_reader, [(s, args.mode, _size(chunk)) for s in _shares(paths, readers)])
                wall = time.perf_counter() - t
                cpu = ", ".join(f"{c:.2f}" for _, _, c in got)
                print(
                    f"  {chunk:>5} requests: {sum(g for g, _, _ in got) / wall / 1e6:,.0f} MB/s; CPU s per reader {cpu}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
