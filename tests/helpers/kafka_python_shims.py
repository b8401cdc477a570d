"""Make kafka-python's optional codecs usable in tests without extra packages.

kafka-python imports python-snappy (`snappy`) and `xxhash` if present; neither is installed here.
python-snappy's `compress`/`decompress` are raw snappy blocks (kafka-python adds the xerial
framing itself), which cramjam provides; `xxhash.xxh32(data).digest()` is only used on LZ4 frame
headers for magic v0, which our `compression.xxh32` covers. The shims change nothing about how
kafka-python frames data, so interop results still come from its own code.
"""

from __future__ import annotations

import cramjam
import kafka.codec

from compaction.format.compression import xxh32


class _Snappy:
    @staticmethod
    def compress(data) -> bytes:
        return bytes(cramjam.snappy.compress_raw(bytes(data)))

    @staticmethod
    def decompress(data) -> bytes:
        return bytes(cramjam.snappy.decompress_raw(bytes(data)))


class _Xxh32Digest:
    def __init__(self, data) -> None:
        self._value = xxh32(bytes(data))

    def digest(self) -> bytes:
        return self._value.to_bytes(4, "big")  # xxhash's canonical (big-endian) digest


class _Xxhash:
    xxh32 = _Xxh32Digest


def install() -> None:
    if kafka.codec.snappy is None:
        kafka.codec.snappy = _Snappy()
    if kafka.codec.xxhash is None:
        kafka.codec.xxhash = _Xxhash()
