"""S3 (and S3-compatible stores: MinIO, Ceph RGW) details that pyarrow.fs does not do our way.

pyarrow's `S3FileSystem.delete_file` and `move` (copy + delete) end by writing a 0-byte "directory
marker" object (`<parent>/`) so that the parent keeps existing when it becomes empty. A Kafka log
dir does not need it, and these markers are objects of ours a user's `aws s3 sync` or download
loop then meets as empty files. So on S3 the deletes are a plain `DeleteObject` through boto3,
built with the very settings of the pyarrow filesystem (credentials, region, endpoint, scheme,
path-style addressing), and a rename is pyarrow's `copy_file` (a server-side copy, which writes no
marker) followed by that delete. Everything else (lists, reads, uploads) stays on pyarrow.

Versioned buckets: a delete there only hides an object behind a delete marker, and an overwrite
keeps the old bytes as a noncurrent version, so the segments a round replaces keep their space
(and, after `--erase-keys`, the erased records). `versioning` reads the bucket's status for the
checks before a round (compaction/cli/preflight.py); `purge_noncurrent` deletes the noncurrent
versions and delete markers of the keys a round replaced, for `--purge-noncurrent-versions`.

Also here: `redact_uri`, so that credentials given in a URI (`s3://KEY:SECRET@bucket/...`, which
pyarrow accepts) never reach a log line or the run report, and `s3_scheme`: the `s3a://` and
`s3n://` of Hadoop's connectors name the same objects as `s3://`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pyarrow.fs as pafs

from compaction.settings import S3_DELETE_RETRIES

# Query parameters of pyarrow's S3/GCS URIs that carry secrets.
_SECRET_PARAMS = frozenset({"access_key", "secret_key", "session_token", "access_token", "credential"})
REDACTED = "***"
# Hadoop's S3 connectors' schemes (S3A, and the retired S3N): the same bucket and key as s3://.
HADOOP_S3_SCHEMES = ("s3a://", "s3n://")
VERSIONED = ("Enabled", "Suspended")  # Suspended: the versions kept while it was on stay


def s3_scheme(uri: str) -> str:
    """`s3a://bucket/logs` -> `s3://bucket/logs` (pyarrow knows only `s3://`); others unchanged."""
    if uri[:6].lower() in HADOOP_S3_SCHEMES:
        return "s3://" + uri[6:]
    return uri


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
        config = Config(
            s3={"addressing_style": style}, retries={"mode": "standard", "max_attempts": S3_DELETE_RETRIES}
        )
        if kw.get("anonymous"):
            from botocore import UNSIGNED

            config = config.merge(Config(signature_version=UNSIGNED))
        self._client = session.client(
            "s3", endpoint_url=endpoint, config=config, verify=kw.get("tls_ca_file_path") or None
        )

    def delete(self, path: str) -> None:
        """Delete the object `bucket/key` (no error if it is already gone). A request the store
        refuses, after the retries of a transient error, is an `OSError` naming the object, as
        pyarrow's are: a storage error, which fails its partition alone (botocore's own errors
        are no `OSError`, and would end the round)."""
        bucket, _, key = path.partition("/")
        with _refusal_as_os_error(f"s3://{bucket}/{key}: could not delete it"):
            self._client.delete_object(Bucket=bucket, Key=key)

    def versioning(self, bucket: str) -> str | None:
        """'Enabled', 'Suspended', or None for a bucket whose versioning was never turned on.
        Raises OSError when the server refuses to say (s3:GetBucketVersioning not granted)."""
        with _refusal_as_os_error(f"cannot read the versioning of bucket {bucket}"):
            return self._client.get_bucket_versioning(Bucket=bucket).get("Status") or None

    def purge_noncurrent(self, prefix: str, wanted: Callable[[str], bool]) -> tuple[int, int]:
        """Delete every noncurrent version and every delete marker of the keys directly under
        `bucket/prefix/` whose name `wanted` accepts; the current version of a key stays.
        Returns (versions deleted, their bytes).

        Versions go first, delete markers after: a marker removed while a version under it
        remained would make that version current again (an old `.swap` would reappear for the
        next run's recovery to act on)."""
        with _refusal_as_os_error(f"s3://{prefix}: could not purge its noncurrent versions"):
            return self._purge_noncurrent(prefix, wanted)

    def _purge_noncurrent(self, prefix: str, wanted: Callable[[str], bool]) -> tuple[int, int]:
        bucket, _, key_prefix = prefix.rstrip("/").partition("/")
        key_prefix += "/"
        versions, markers = [], []
        pages = self._client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=key_prefix)
        for page in pages:
            for v in page.get("Versions", []):
                if not v["IsLatest"] and _direct_child(v["Key"], key_prefix, wanted):
                    versions.append(v)
            for m in page.get("DeleteMarkers", []):
                if _direct_child(m["Key"], key_prefix, wanted):
                    markers.append(m)
        for batch in (versions, markers):
            for i in range(0, len(batch), 1000):  # DeleteObjects takes at most 1000 keys
                chunk = batch[i : i + 1000]
                objects = [{"Key": o["Key"], "VersionId": o["VersionId"]} for o in chunk]
                out = self._client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
                if out.get("Errors"):
                    e = out["Errors"][0]
                    raise OSError(
                        f"s3://{bucket}/{e.get('Key')} version {e.get('VersionId')}: could not delete it: "
                        f"{e.get('Code')} {e.get('Message')}"
                    )
        return len(versions), sum(v.get("Size", 0) for v in versions)


@contextlib.contextmanager
def _refusal_as_os_error(what: str):
    """botocore's errors (no `OSError`: they would end the round) as an `OSError` "`what`: the
    error", as pyarrow's storage errors are: one that fails its partition alone."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise OSError(f"{what}: {exc}") from None


def _direct_child(key: str, prefix: str, wanted: Callable[[str], bool]) -> bool:
    name = key[len(prefix) :]
    return key.startswith(prefix) and "/" not in name and wanted(name)
