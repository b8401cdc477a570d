"""S3 (and S3-compatible stores: MinIO, Ceph RGW) details that pyarrow.fs does not do our way.

pyarrow's `S3FileSystem.delete_file` and `move` (copy + delete) end by writing a 0-byte "directory
marker" object (`<parent>/`) so that the parent keeps existing when it becomes empty. A Kafka log
dir does not need it, and these markers are objects of ours a user's `aws s3 sync` or download
loop then meets as empty files. So on S3 the deletes are a plain `DeleteObject` through boto3,
built with the very settings of the pyarrow filesystem (credentials, region, endpoint, scheme,
path-style addressing), and a rename is pyarrow's `copy_file` (a server-side copy, which writes no
marker) followed by that delete. Everything else (lists, reads, uploads) stays on pyarrow.

Also here: `redact_uri`, so that credentials given in a URI (`s3://KEY:SECRET@bucket/...`, which
pyarrow accepts) never reach a log line or the run report.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pyarrow.fs as pafs

# Query parameters of pyarrow's S3/GCS URIs that carry secrets.
_SECRET_PARAMS = frozenset({"access_key", "secret_key", "session_token", "access_token", "credential"})
REDACTED = "***"


def redact_uri(uri: str) -> str:
    """`s3://KEY:SECRET@bucket/logs?secret_key=X` -> `s3://***@bucket/logs?secret_key=***`.
    Paths without a scheme are returned as they are."""
    if "://" not in uri:
        return uri
    try:
        parts = urlsplit(uri)
    except ValueError:  # not parseable: hide everything after the scheme's authority marker
        return re.sub(r"://[^/]*@", f"://{REDACTED}@", uri)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, REDACTED if k.lower() in _SECRET_PARAMS else v) for k, v in pairs], safe="*:/")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def base_s3(filesystem: pafs.FileSystem) -> pafs.S3FileSystem | None:
    while isinstance(filesystem, pafs.SubTreeFileSystem):
        filesystem = filesystem.base_fs
    return filesystem if isinstance(filesystem, pafs.S3FileSystem) else None


class ObjectDeleter:
    """`DeleteObject` with the settings of a pyarrow `S3FileSystem` (taken from its pickle state,
    which is exactly its constructor's arguments)."""

    def __init__(self, filesystem: pafs.S3FileSystem) -> None:
        import boto3
        from botocore.config import Config

        kw = filesystem.__reduce__()[1][0]
        endpoint = kw.get("endpoint_override") or None
        if endpoint and "://" not in endpoint:
            endpoint = f"{kw.get('scheme') or 'https'}://{endpoint}"
        style = "virtual" if kw.get("force_virtual_addressing") else "path"  # pyarrow's default: path
        session = boto3.session.Session(
            aws_access_key_id=kw.get("access_key") or None,
            aws_secret_access_key=kw.get("secret_key") or None,
            aws_session_token=kw.get("session_token") or None,
            region_name=kw.get("region") or None,
        )
        config = Config(s3={"addressing_style": style}, retries={"mode": "standard", "max_attempts": 3})
        if kw.get("anonymous"):
            from botocore import UNSIGNED

            config = config.merge(Config(signature_version=UNSIGNED))
        self._client = session.client("s3", endpoint_url=endpoint, config=config,
                                      verify=kw.get("tls_ca_file_path") or None)  # fmt: skip

    def delete(self, path: str) -> None:
        """Delete the object `bucket/key` (no error if it is already gone)."""
        bucket, _, key = path.partition("/")
        self._client.delete_object(Bucket=bucket, Key=key)
