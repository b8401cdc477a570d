"""S3 details without a server: credentials in URIs never shown, the boto3 deleter built with the
pyarrow filesystem's own settings (the server end to end: test_s3_e2e.py)."""

from __future__ import annotations

import pickle

import pyarrow.fs as pafs
import pytest

from compaction import round as run
from compaction.cli.options import parse_args
from compaction.runtime.s3 import ObjectDeleter, redact_uri
from compaction.runtime.storage import Storage


@pytest.mark.parametrize(
    "uri, shown",
    [
        ("s3://AKIA:s3cret@bucket/logs", "s3://***@bucket/logs"),
        (
            "s3://AKIA:s3cret@bucket/logs?region=eu-west-1&endpoint_override=minio:9000",
            "s3://***@bucket/logs?region=eu-west-1&endpoint_override=minio:9000",
        ),
        (
            "s3://bucket/logs?access_key=AKIA&secret_key=s3cret&session_token=tok&scheme=http",
            "s3://bucket/logs?access_key=***&secret_key=***&session_token=***&scheme=http",
        ),
        ("s3://bucket/logs", "s3://bucket/logs"),
        # every option shown as given, an empty one too (it is what the run used)
        (
            "s3://bucket/logs?region=&session_token=&scheme=http",
            "s3://bucket/logs?region=&session_token=***&scheme=http",
        ),
        ("/data/kafka-logs", "/data/kafka-logs"),
        ("s3://AKIA:s3cret@[bucket/logs", "s3://***@[bucket/logs"),  # a typo urlsplit refuses
        ("hdfs://user@namenode:8020/logs", "hdfs://***@namenode:8020/logs"),
    ],
)
def test_redact_uri(uri, shown):
    assert redact_uri(uri) == shown


def test_report_args_and_partition_log_dirs_carry_no_credentials():
    opts = parse_args(
        [
            "--log-dir",
            "s3://AKIA:s3cret@bucket/logs",
            "--log-dir",
            "/local",
            "--report",
            "s3://AKIA:s3cret@bucket/report.json",
        ]
    )
    echo = run._args_echo(opts)
    assert echo["log_dirs"] == ["s3://***@bucket/logs", "/local"]
    assert echo["report"] == "s3://***@bucket/report.json"
    assert "s3cret" not in repr(echo) and "AKIA" not in repr(echo)
    assert opts.log_dirs[0] == "s3://AKIA:s3cret@bucket/logs"  # the job itself still uses them


def test_storage_repr_hides_credentials_but_pickles_them():
    storage, path = Storage.for_uri(
        "s3://AKIA:s3cret@bucket/logs?region=us-east-1&endpoint_override=127.0.0.1:1"
    )
    assert path == "bucket/logs"
    assert "s3cret" not in repr(storage)
    assert pickle.loads(pickle.dumps(storage))._uri == storage._uri  # executors rebuild the same filesystem


def test_deleter_takes_the_filesystems_settings():
    fs = pafs.S3FileSystem(
        access_key="AKIA",
        secret_key="s3cret",
        region="eu-central-1",
        endpoint_override="minio.local:9000",
        scheme="http",
    )
    client = ObjectDeleter(fs)._client
    assert client.meta.endpoint_url == "http://minio.local:9000"
    assert client.meta.region_name == "eu-central-1"
    assert client.meta.config.s3["addressing_style"] == "path"  # pyarrow's default, what MinIO/Ceph want
    creds = client._request_signer._credentials
    assert (creds.access_key, creds.secret_key) == ("AKIA", "s3cret")


def test_the_deleter_of_an_aws_bucket_talks_to_the_buckets_region():
    """No endpoint override (AWS itself): the deletes go to the region's S3 endpoint, signed with
    the temporary credentials (an assumed role's session token) the filesystem has."""
    fs = pafs.S3FileSystem(access_key="ASIA", secret_key="s3cret", session_token="tok", region="eu-west-1")
    client = ObjectDeleter(fs)._client
    assert client.meta.endpoint_url == "https://s3.eu-west-1.amazonaws.com"
    creds = client._request_signer._credentials
    assert (creds.access_key, creds.secret_key, creds.token) == ("ASIA", "s3cret", "tok")


@pytest.mark.parametrize("scheme", ["s3a", "s3n", "S3A"])
def test_hadoop_schemes_keep_the_uris_credentials_and_path(scheme):
    storage, path = Storage.for_uri(f"{scheme}://AKIA:s3cret@bucket/logs?region=eu-west-1")
    assert (storage.is_s3, path) == (True, "bucket/logs")
    creds = storage._s3_deleter()._client._request_signer._credentials
    assert (creds.access_key, creds.secret_key) == ("AKIA", "s3cret")


def test_a_store_that_cannot_be_reached_is_an_os_error_naming_the_bucket():
    storage, path = Storage.for_uri(
        "s3://AKIA:s3cret@bucket/logs?region=us-east-1&endpoint_override=127.0.0.1:1&scheme=http"
    )  # nothing listens on port 1
    with pytest.raises(
        OSError, match="cannot read the versioning of bucket bucket: Could not connect"
    ) as err:
        storage.bucket_versioning(path)
    assert "s3cret" not in str(err.value)


def test_dump_prints_uris_without_credentials(tmp_path):
    import io

    from compaction.tools import dump

    uri = (
        "s3://AKIA:s3cret@bucket/logs/t-0/00000000000000000000.log?endpoint_override=127.0.0.1:9&scheme=http"
    )
    out, err = io.StringIO(), io.StringIO()
    dump.dump_files([uri], dump.DumpOptions(), out, err)  # nothing listens on port 9: a read error
    text = out.getvalue() + err.getvalue()
    assert "Dumping s3://***@bucket/logs/t-0/00000000000000000000.log" in text
    assert "s3cret" not in text and "AKIA" not in text
    assert "cannot read s3://***@bucket" in text  # recognised as a .log despite the ?options
