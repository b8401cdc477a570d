"""Records of Kafka's coordinators, decoded as kafka-dump-log prints them (pure functions): the
schema reader they share. `__consumer_offsets` records are in `consumer_offsets`,
`__transaction_state` records in `transaction_log`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Literal, TypeVar, overload

from compaction.errors import DecodeError
from compaction.format.varint import _read_unsigned

Parsed = tuple[str | None, str | None]  # (key text, payload text); None: not printed
T = TypeVar("T")


class Reader:
    """Kafka's `ByteBufferAccessor` over one key or value: classic (int16/int32 lengths) or
    flexible (unsigned varint length + 1, tagged fields at the end of each struct) encoding."""

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data, self.pos, self.flexible = data, 0, flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise DecodeError(f"needs {n} bytes at byte {self.pos}, {len(self.data) - self.pos} left")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def _fixed(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self._take(size))[0]

    def int8(self) -> int:
        return self._fixed(">b")

    def int16(self) -> int:
        return self._fixed(">h")

    def int32(self) -> int:
        return self._fixed(">i")

    def int64(self) -> int:
        return self._fixed(">q")

    def uvarint(self) -> int:
        try:
            value, self.pos = _read_unsigned(self.data, self.pos, 5, "unsigned varint")
        except Exception as exc:  # a varint running past the end
            raise DecodeError(str(exc)) from None
        return value

    def _length(self, classic_fmt: str) -> int:
        """Length of a string/bytes/array; -1 is null."""
        return self.uvarint() - 1 if self.flexible else self._fixed(classic_fmt)

    @overload
    def string(self, nullable: Literal[False] = False) -> str: ...
    @overload
    def string(self, nullable: bool) -> str | None: ...
    def string(self, nullable: bool = False) -> str | None:
        n = self._length(">h")
        if n < 0:
            if nullable:
                return None
            raise DecodeError(f"null string at byte {self.pos} in a non-nullable field")
        return self._take(n).decode("utf-8")

    @overload
    def bytes_(self, nullable: Literal[False] = False) -> bytes: ...
    @overload
    def bytes_(self, nullable: bool) -> bytes | None: ...
    def bytes_(self, nullable: bool = False) -> bytes | None:
        n = self._length(">i")
        if n < 0:
            if nullable:
                return None
            raise DecodeError(f"null bytes at byte {self.pos} in a non-nullable field")
        return self._take(n)

    @overload
    def array(self, read_item: Callable[[], T], nullable: Literal[False] = False) -> list[T]: ...
    @overload
    def array(self, read_item: Callable[[], T], nullable: bool) -> list[T] | None: ...
    def array(self, read_item: Callable[[], T], nullable: bool = False) -> list[T] | None:
        n = self._length(">i")
        if n < 0:
            if nullable:
                return None
            raise DecodeError(f"null array at byte {self.pos} in a non-nullable field")
        return [read_item() for _ in range(n)]

    def tagged_fields(self) -> dict[int, bytes]:
        """The tagged-field section of a flexible struct: {tag: raw bytes}."""
        if not self.flexible:
            return {}
        out: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self._take(self.uvarint())
        return out

    def end(self) -> None:
        if self.pos != len(self.data):
            left = len(self.data) - self.pos
            raise DecodeError(f"{left} unexpected bytes after the struct at byte {self.pos}")
