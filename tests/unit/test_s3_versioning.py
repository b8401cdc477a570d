"""S3 against moto's S3 server (no Spark): renames and deletes that leave no directory marker;
versioned buckets: the checks before a round (a WARN, and an erasing pass refused unless it
purges) and `--purge-noncurrent-versions`' deletion of the old versions of a partition's segment
objects, and of nothing else; `s3a://` read as `s3://`.
The round end to end on a versioned bucket: tests/e2e/test_s3_e2e.py."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from s3kit import KEY, REGION, SECRET, client, moto_server, throttling, versions

from compaction.cli.preflight import check_round, check_versioning
from compaction.errors import UsageError
from compaction.runtime.storage import Storage
from compaction.settings import JobOptions
from compaction.steps.commit import is_segment_object

pytest.importorskip("moto")

SEG = "00000000000000000000"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with moto_server(str(tmp_path_factory.mktemp("moto") / "server.log")) as endpoint:
        yield client(endpoint), endpoint.removeprefix("http://")


def _uri(endpoint: str, bucket: str, scheme: str = "s3") -> str:
    return f"{scheme}://{KEY}:{SECRET}@{bucket}/logs?endpoint_override={endpoint}&scheme=http&region={REGION}"


def _bucket(s3, name: str, status: str | None) -> None:
    c, _ = s3
    c.create_bucket(Bucket=name)
    if status:
        c.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": status})
    c.put_object(Bucket=name, Key=f"logs/orders-0/{SEG}.log", Body=b"segment")
    c.put_object(Bucket=name, Key="logs/cleaner-offset-checkpoint", Body=b"0\n0\n")


def _opts(uri: str, **kw) -> JobOptions:
    return JobOptions(log_dirs=[uri], **kw)


def test_renames_and_deletes_leave_exactly_the_log_dirs_objects(s3):
    """A swap's renames (copy + delete) and removals on S3 leave the partition's objects and no
    0-byte `dir/` marker object (which `aws s3 sync` would download as a file); deleting a missing
    object is an error unless the caller allows it."""
    c, endpoint = s3
    _bucket(s3, "swap", None)
    part = "logs/orders-0"
    c.put_object(Bucket="swap", Key=f"{part}/{SEG}.log.cleaned", Body=b"cleaned")
    c.put_object(Bucket="swap", Key="logs/orders-9/old.log.deleted", Body=b"old")
    storage, path = Storage.for_uri(_uri(endpoint, "swap"))
    storage.rename(f"{path}/orders-0/{SEG}.log", f"{path}/orders-0/{SEG}.log.deleted")
    storage.rename(f"{path}/orders-0/{SEG}.log.cleaned", f"{path}/orders-0/{SEG}.log")
    storage.delete(f"{path}/orders-0/{SEG}.log.deleted")
    storage.delete(f"{path}/orders-9/old.log.deleted")  # the last object under its prefix
    with pytest.raises(FileNotFoundError):
        storage.delete(f"{path}/orders-0/{SEG}.log.deleted")
    storage.delete(f"{path}/orders-0/{SEG}.log.deleted", missing_ok=True)
    listed = c.list_objects_v2(Bucket="swap").get("Contents", [])
    assert sorted(o["Key"] for o in listed) == ["logs/cleaner-offset-checkpoint", f"{part}/{SEG}.log"]
    assert c.get_object(Bucket="swap", Key=f"{part}/{SEG}.log")["Body"].read() == b"cleaned"


@pytest.mark.parametrize("refusals, through", [(1, True), (3, True), (4, False)])
def test_a_delete_retries_a_store_that_sheds_load_three_times(s3, refusals, through):
    """S3 answers `503 SlowDown` when it sheds load: the removal of a replaced segment is retried
    3 times after its first request (`S3_DELETE_RETRIES`, as pyarrow does for its own requests)
    instead of failing the round's commit at once; a fourth refusal is the store's answer, met
    after 4 requests and no more: an `OSError` naming the object, as a storage error is."""
    c, endpoint = s3
    bucket = f"busy-{refusals}"
    _bucket(s3, bucket, None)
    key = f"logs/orders-0/{SEG}.log.deleted"
    c.put_object(Bucket=bucket, Key=key, Body=b"replaced")
    with throttling(f"http://{endpoint}", 0) as (proxy, left):
        storage, _ = Storage.for_uri(_uri(proxy.removeprefix("http://"), bucket))
        deleter = storage._s3_deleter()  # built before the store turns busy
        left[0] = refusals
        if through:
            deleter.delete(f"{bucket}/{key}")
            assert left[0] == -1  # every refusal met, then one request through
        else:
            with pytest.raises(OSError, match=rf"^s3://{bucket}/{key}: could not delete it: .*SlowDown"):
                storage.delete(f"{bucket}/{key}", missing_ok=True)
            assert left[0] == 0  # 4 requests, each refused
    listed = c.list_objects_v2(Bucket=bucket, Prefix="logs/orders-0/")["Contents"]
    assert [o["Key"] for o in listed] == [f"logs/orders-0/{SEG}.log"] + ([] if through else [key])


@pytest.mark.parametrize("status", ["Enabled", "Suspended"])
def test_an_erasing_pass_on_a_versioned_bucket_is_refused_unless_it_purges(s3, status):
    bucket = f"erase-{status.lower()}"
    _bucket(s3, bucket, status)
    uri = _uri(s3[1], bucket)
    with pytest.raises(UsageError) as err:
        check_round(_opts(uri, erase_keys="keys.txt"))
    text = str(err.value)
    assert f"bucket {bucket} is versioned ({status})" in text and "--purge-noncurrent-versions" in text
    assert SECRET not in text
    (warning,) = check_round(_opts(uri, erase_keys="keys.txt", purge_noncurrent_versions=True))
    assert "deletes the noncurrent versions" in warning
    # writes nothing: said, not refused
    (warning,) = check_round(_opts(uri, erase_keys="keys.txt", dry_run=True))
    assert f"is versioned ({status})" in warning and "NoncurrentVersionExpiration" in warning


def test_a_round_on_a_versioned_bucket_is_said_at_warn_and_runs(s3):
    _bucket(s3, "plain-versioned", "Enabled")
    (warning,) = check_versioning(_opts(_uri(s3[1], "plain-versioned")))
    assert "stay as noncurrent versions and keep their space" in warning


def test_an_unversioned_bucket_says_nothing(s3):
    _bucket(s3, "unversioned", None)
    assert check_round(_opts(_uri(s3[1], "unversioned"), erase_keys="keys.txt")) == []


def test_a_bucket_whose_versioning_cannot_be_read_is_an_os_error_naming_it(s3):
    storage, path = Storage.for_uri(_uri(s3[1], "no-such-bucket"))
    with pytest.raises(OSError, match=r"cannot read the versioning of bucket no-such-bucket: .*NoSuchBucket"):
        storage.bucket_versioning(path)


def test_purging_without_a_log_dir_on_s3_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no --log-dir is on S3"):
        check_versioning(_opts(str(tmp_path), purge_noncurrent_versions=True))


def test_purge_deletes_the_old_versions_of_the_partitions_segment_objects_only(s3):
    c, endpoint = s3
    _bucket(s3, "purge", "Enabled")
    put = lambda key, body: c.put_object(Bucket="purge", Key=key, Body=body)  # noqa: E731
    part = "logs/orders-0"
    put(f"{part}/{SEG}.log", b"new segment")  # the old one becomes noncurrent
    put(f"{part}/{SEG}.index", b"old index")
    put(f"{part}/{SEG}.index", b"new index")
    put(f"{part}/{SEG}.log.deleted", b"old segment")
    c.delete_object(Bucket="purge", Key=f"{part}/{SEG}.log.deleted")  # a delete marker over it
    put(f"{part}/00000000000000000100.log.swap", b"new")
    c.delete_object(Bucket="purge", Key=f"{part}/00000000000000000100.log.swap")
    put(f"{part}/compaction-commit.json", b"{}")
    c.delete_object(Bucket="purge", Key=f"{part}/compaction-commit.json")
    kept = {  # objects with noncurrent versions that are not the partition's segment objects
        f"{part}/leader-epoch-checkpoint",
        f"{part}/notes/{SEG}.log",
        f"logs/orders-1/{SEG}.log",
        f"logs/orders-01/{SEG}.log",
        "logs/cleaner-offset-checkpoint",
    }
    for key in kept:
        put(key, b"one")
        put(key, b"two")
    before, _ = versions(c, "purge")
    storage, path = Storage.for_uri(_uri(endpoint, "purge"))
    count, size = storage.purge_noncurrent_versions(f"{path}/orders-0", is_segment_object)
    after, markers = versions(c, "purge")
    in_part = [v for v in after if v["Key"].startswith(part + "/") and v["Key"] not in kept]
    assert sorted((v["Key"], v["IsLatest"]) for v in in_part) == [
        (f"{part}/{SEG}.index", True),
        (f"{part}/{SEG}.log", True),
    ]
    assert c.get_object(Bucket="purge", Key=f"{part}/{SEG}.log")["Body"].read() == b"new segment"
    assert [m for m in markers if m["Key"].startswith(part + "/") and m["Key"] not in kept] == []
    for key in kept:
        assert [v for v in after if v["Key"] == key] == [v for v in before if v["Key"] == key], key
    assert count == len(before) - len(after) == 5  # segment, index, .deleted, .swap, intent
    assert size == len(b"segment") + len(b"old index") + len(b"old segment") + len(b"new") + len(b"{}")


def test_a_purge_of_more_versions_than_one_request_takes_deletes_every_one(s3, monkeypatch):
    """Segments rewritten by many rounds: their noncurrent versions fill more than one listing page
    and more than one `DeleteObjects` request, which S3 caps at 1000 keys (moto does not); each
    version goes in exactly one request, none is left, the current ones stay."""
    c, endpoint = s3
    c.create_bucket(Bucket="many")
    c.put_bucket_versioning(Bucket="many", VersioningConfiguration={"Status": "Enabled"})
    keys = [f"logs/orders-0/{base:020d}.log" for base in range(0, 800, 100)]
    rounds = 127  # per key: 8 x 126 = 1008 noncurrent versions

    def rewrite(key: str) -> None:  # a key's versions one after another (moto orders them per key)
        for i in range(rounds):
            c.put_object(Bucket="many", Key=key, Body=b"x" * (i % 7))

    with ThreadPoolExecutor(len(keys)) as pool:
        list(pool.map(rewrite, keys))
    current = sorted((key, c.head_object(Bucket="many", Key=key)["VersionId"]) for key in keys)
    old = [v for v in versions(c, "many")[0] if not v["IsLatest"]]
    storage, path = Storage.for_uri(_uri(endpoint, "many"))
    deleter = storage._s3_deleter()
    requests, real = [], deleter._client.delete_objects

    def delete_objects(**kw):
        requests.append([(o["Key"], o["VersionId"]) for o in kw["Delete"]["Objects"]])
        return real(**kw)

    monkeypatch.setattr(deleter._client, "delete_objects", delete_objects)
    count, size = storage.purge_noncurrent_versions(f"{path}/orders-0", is_segment_object)
    after, _ = versions(c, "many")
    assert sorted((v["Key"], v["VersionId"]) for v in after) == current
    assert max(map(len, requests)) <= 1000
    assert sorted(o for r in requests for o in r) == sorted((v["Key"], v["VersionId"]) for v in old)
    assert (count, size) == (len(old), sum(v["Size"] for v in old)) and count == len(keys) * (rounds - 1)


def test_a_purge_the_bucket_refuses_fails_naming_the_object_and_the_reason(s3):
    """An old version under an Object Lock legal hold cannot be deleted: the purge fails with the
    object and the server's reason (not a silent success that leaves erased records stored)."""
    c, endpoint = s3
    c.create_bucket(Bucket="locked", ObjectLockEnabledForBucket=True)
    key = f"logs/orders-0/{SEG}.log"
    c.put_object(Bucket="locked", Key=key, Body=b"erased record", ObjectLockLegalHoldStatus="ON")
    c.put_object(Bucket="locked", Key=key, Body=b"rewritten")
    storage, path = Storage.for_uri(_uri(endpoint, "locked"))
    with pytest.raises(OSError) as err:
        storage.purge_noncurrent_versions(f"{path}/orders-0", is_segment_object)
    assert f"s3://locked/{key}" in str(err.value) and "AccessDenied" in str(err.value)
    assert SECRET not in str(err.value)
    assert c.get_object(Bucket="locked", Key=key)["Body"].read() == b"rewritten"


def test_a_purge_whose_listing_the_store_keeps_refusing_is_an_os_error_naming_the_partition(s3):
    """A store that sheds load past the retries: the purge's failure is an `OSError` naming the
    partition's prefix (the round reports it for that partition), and nothing is deleted."""
    c, endpoint = s3
    _bucket(s3, "busy-purge", "Enabled")
    key = f"logs/orders-0/{SEG}.log"
    c.put_object(Bucket="busy-purge", Key=key, Body=b"rewritten")
    before = versions(c, "busy-purge")
    with throttling(f"http://{endpoint}", 0) as (proxy, left):
        storage, path = Storage.for_uri(_uri(proxy.removeprefix("http://"), "busy-purge"))
        storage._s3_deleter()  # built before the store turns busy
        left[0] = 4
        with pytest.raises(OSError, match=r"^s3://busy-purge/logs/orders-0: could not purge .*SlowDown"):
            storage.purge_noncurrent_versions(f"{path}/orders-0", is_segment_object)
        assert left[0] == 0
    assert versions(c, "busy-purge") == before


def test_a_purge_interrupted_between_versions_and_markers_resurrects_nothing(s3, monkeypatch):
    """Versions are deleted before the markers over them: stopped in between, no old object is
    current again (an old `.swap` would be acted on by the next run's recovery)."""
    c, endpoint = s3
    _bucket(s3, "halfway", "Enabled")
    key = f"logs/orders-0/{SEG}.log.swap"
    c.put_object(Bucket="halfway", Key=key, Body=b"old swap")
    c.delete_object(Bucket="halfway", Key=key)
    storage, path = Storage.for_uri(_uri(endpoint, "halfway"))
    deleter = storage._s3_deleter()
    real = deleter._client.delete_objects
    calls = []

    def first_batch_only(**kw):
        calls.append(kw)
        if len(calls) > 1:
            raise OSError("stopped")
        return real(**kw)

    monkeypatch.setattr(deleter._client, "delete_objects", first_batch_only)
    with pytest.raises(OSError):
        storage.purge_noncurrent_versions(f"{path}/orders-0", is_segment_object)
    assert len(calls) == 2  # the versions' batch went, the markers' did not
    listed = c.list_objects_v2(Bucket="halfway", Prefix="logs/orders-0/").get("Contents", [])
    assert key not in [o["Key"] for o in listed]  # still deleted
    assert [m["Key"] for m in versions(c, "halfway")[1]] == [key]


@pytest.mark.parametrize("scheme", ["s3a", "s3n"])
def test_hadoop_s3_schemes_name_the_same_objects(s3, scheme):
    _bucket(s3, f"hadoop-{scheme}", None)
    storage, path = Storage.for_uri(_uri(s3[1], f"hadoop-{scheme}", scheme))
    assert storage.is_s3 and path == f"hadoop-{scheme}/logs"
    assert [i.name for i in storage.list_dir(path)] == ["cleaner-offset-checkpoint", "orders-0"]
    check_round(_opts(_uri(s3[1], f"hadoop-{scheme}", scheme)))  # a Kafka log dir, as with s3://
