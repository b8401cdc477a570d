"""gzip libraries on record-like data: why compaction.format.compression writes gzip with ISA-L.

    .venv/bin/python bench/gzip_libs.py [--chunks 2000]

Chunks of 30 records (a 24-byte key + 100-1000 random lowercase letters), ~16 KB each, like the
records region of one batch. Each library compresses every chunk into one gzip member and
decompresses it again; every output is also decoded by the stdlib (any gzip reader must take it).
Prints MB/s of input compressed and decompressed, and the output/input ratio. zlib-ng is measured
when installed (it is not a dependency).
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time

import numpy as np
from isal import igzip


def chunks_of(n: int) -> list[bytes]:
    rng = np.random.default_rng(1)
    out = []
    for _ in range(n):
        parts = [
            b"key-%020d" % rng.integers(0, 300_000)
            + rng.integers(97, 123, rng.integers(100, 1000), dtype=np.uint8).tobytes()
            for _ in range(30)
        ]
        out.append(b"".join(parts))
    return out


def libraries():
    yield "stdlib gzip, level 6 (Kafka's)", lambda x: gzip.compress(x, 6, mtime=0), gzip.decompress
    try:
        from zlib_ng import gzip_ng

        yield "zlib-ng, level 6", lambda x: gzip_ng.compress(x, 6, mtime=0), gzip_ng.decompress
        yield "zlib-ng, level 1", lambda x: gzip_ng.compress(x, 1, mtime=0), gzip_ng.decompress
    except ImportError:
        pass
    yield "ISA-L, level 2", lambda x: igzip.compress(x, 2, mtime=0), igzip.decompress
    yield "ISA-L, level 3 (ours)", lambda x: igzip.compress(x, 3, mtime=0), igzip.decompress


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=2000)
    args = ap.parse_args()
    chunks = chunks_of(args.chunks)
    total = sum(map(len, chunks))
    print(f"{len(chunks):,} chunks, {total / 1e6:.1f} MB")
    for name, compress, decompress in libraries():
        t = time.perf_counter()
        packed = [compress(c) for c in chunks]
        tc = time.perf_counter() - t
        t = time.perf_counter()
        back = [decompress(p) for p in packed]
        td = time.perf_counter() - t
        if back != chunks or any(gzip.decompress(p) != c for p, c in zip(packed, chunks, strict=True)):
            print(f"{name}: round trip FAILED", file=sys.stderr)
            return 1
        print(
            f"  {name:32s} compress {total / tc / 1e6:7.1f} MB/s  decompress {total / td / 1e6:7.1f} MB/s  "
            f"ratio {sum(map(len, packed)) / total:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
