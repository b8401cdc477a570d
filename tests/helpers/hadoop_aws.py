"""hadoop-aws and its AWS SDK for the tests that read `s3a://` with Spark: the version of the
installed pyspark's Hadoop (its `hadoop-client-api-<version>.jar`), fetched from Maven Central.

    python tests/helpers/hadoop_aws.py install     # .ci/run, with the project's venv

`install` resolves `org.apache.hadoop:hadoop-aws:<Hadoop version>` with Maven into
`~/.cache/kafka-compaction/hadoop-aws-<version>/libs` (`KAFKA4_CACHE` moves the parent, as for
the Kafka jars): hadoop-aws, the AWS SDK bundle its pom names, and their runtime dependencies;
Hadoop itself comes from pyspark's `hadoop-client-*` jars. A test calls `require()`: skipped
locally when the jars are not there, failed under `CI=true`, where `.ci/run` fetches them.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import envkit

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.kafka-compaction</groupId><artifactId>hadoop-aws-jars</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-aws</artifactId><version>{version}</version></dependency>
  </dependencies>
</project>
"""


def spark_jars() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("no pyspark installed, whose Hadoop version hadoop-aws must match")
    return Path(next(iter(spec.submodule_search_locations))).resolve() / "jars"


def hadoop_version() -> str:
    """The Hadoop version pyspark ships (hadoop-aws of another version fails at class loading)."""
    for jar in spark_jars().glob("hadoop-client-api-*.jar"):
        m = re.fullmatch(r"hadoop-client-api-(.+)\.jar", jar.name)
        if m:
            return m.group(1)
    raise RuntimeError(f"no hadoop-client-api-*.jar in {spark_jars()}")


def cache() -> Path:
    parent = Path(os.environ.get("KAFKA4_CACHE") or Path.home() / ".cache" / "kafka-compaction")
    return parent / f"hadoop-aws-{hadoop_version()}"


def libs() -> Path:
    return cache() / "libs"


def complete() -> Path:
    return libs() / ".complete"  # written last by install(): a half-filled cache is never used


def jars() -> list[str]:
    return sorted(str(p) for p in libs().glob("*.jar"))


def missing() -> str | None:
    """Why the s3a tests cannot run here, or None."""
    if not complete().exists():
        return (
            f"hadoop-aws {hadoop_version()} and its AWS SDK are not in {libs()} "
            "(run: .venv/bin/python tests/helpers/hadoop_aws.py install)"
        )
    return None


def require() -> None:
    """Skip the calling test when the jars are missing (fail it under CI=true)."""
    envkit.need("s3a tests", missing(), ".ci/run installs them")


def install() -> None:
    """Fetch hadoop-aws of pyspark's Hadoop version and its runtime dependencies with Maven (once)."""
    if complete().exists():
        print(f"hadoop-aws {hadoop_version()}: jars in {libs()}")
        return
    envkit.maven_copy(POM.format(version=hadoop_version()), cache(), libs())
    print(f"hadoop-aws {hadoop_version()}: jars in {libs()}")


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: hadoop_aws.py install")
    install()
