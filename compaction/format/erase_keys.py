"""The `--erase-keys` key file: one key a line (stdlib only: the launcher checks it before Spark).

    user-42                  a text key (its UTF-8 bytes), in every selected topic
    hex:00ff10               a binary key, hex digits
    base64:AP8Q              a binary key, standard base64 (padding required)
    text:hex:not-a-prefix    a text key that starts like a prefix or like a comment
    orders<TAB>user-42       the key only in topic `orders` (any of the three forms after the TAB)
    # a comment              lines starting with '#' and empty lines are skipped

A key is exact bytes: spaces count; a trailing CR (a CRLF file) is not part of the line. A text
key holding a TAB, or an empty key, is written with `hex:`/`base64:` (`hex:` alone is the empty
key). A malformed line is a `UsageError` naming the file, the line and its byte position.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable

from compaction.errors import KeyFileError, UsageError
from compaction.format.naming import MAX_TOPIC_LENGTH

COMMENT = "#"
SCOPE_SEPARATOR = "\t"
_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})*")

Entry = tuple[str | None, bytes]  # (topic or None: every topic, key)

KEY_FILE_FORMAT = (
    "one key a line: TEXT (its UTF-8 bytes), hex:HEX, base64:B64 or text:TEXT; 'TOPIC<TAB>KEY' "
    "limits a key to one topic; '#' lines and empty lines are skipped"
)


def _key_bytes(spec: str) -> bytes:
    """The bytes of one key as written (raises ValueError with what is wrong)."""
    if spec.startswith("hex:"):
        digits = spec[4:]
        if not _HEX.fullmatch(digits):
            raise ValueError("hex: needs an even number of hex digits and nothing else")
        return bytes.fromhex(digits)
    if spec.startswith("base64:"):
        try:
            return base64.b64decode(spec[7:], validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("base64: is not valid standard base64 (A-Z a-z 0-9 + /, '=' padding)") from None
    if spec.startswith("text:"):
        spec = spec[5:]
    if not spec:
        raise ValueError("empty key: write the empty key as 'hex:'")
    return spec.encode("utf-8")


def parse_line(line: str) -> tuple[str | None, bytes] | None:
    """(topic or None, key) of one line without its line break; None for a comment or an empty
    line. Raises ValueError saying what is wrong."""
    if not line or line.startswith(COMMENT):
        return None
    parts = line.split(SCOPE_SEPARATOR)
    if len(parts) > 2:
        raise ValueError("more than one TAB: a key holding a TAB is written as hex: or base64:")
    topic = parts[0] if len(parts) == 2 else None
    if topic is not None and not (
        _TOPIC.fullmatch(topic) and len(topic) <= MAX_TOPIC_LENGTH and topic not in (".", "..")
    ):
        raise ValueError("the text before the TAB is not a Kafka topic name ([a-zA-Z0-9._-], 1-249 chars)")
    return topic, _key_bytes(parts[-1])


def parse_key_file(data: bytes, path: str) -> list[Entry]:
    """The key file's entries (module doc), or `KeyFileError` at the first malformed line."""
    entries, position = [], 0
    for n, raw in enumerate(data.split(b"\n"), start=1):
        line_start, position = position, position + len(raw) + 1
        raw = raw[:-1] if raw.endswith(b"\r") else raw
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise KeyFileError(
                path, n, line_start + exc.start, "not UTF-8 (write binary keys as hex: or base64:)"
            ) from None
        try:
            entry = parse_line(text)
        except ValueError as exc:
            raise KeyFileError(path, n, line_start, str(exc)) from None
        if entry is not None:
            entries.append(entry)
    return entries


def _read_local(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def read_key_file(path: str, read: Callable[[str], bytes] = _read_local, shown: str | None = None) -> bytes:
    """A key file's bytes (`read(path) -> bytes`; default: a local file); an unreadable one is a
    `UsageError` naming it as `shown` (a URI without its credentials)."""
    try:
        return read(path)
    except OSError as exc:
        raise UsageError(f"--erase-keys {shown or path}: {getattr(exc, 'strerror', None) or exc}") from None
