"""A real Apache Kafka 4.x broker for the tests and benches: jars from Maven Central, a single-node
KRaft broker (broker and controller in one JVM) on 127.0.0.1, Kafka's own Java clients, and the
broker's log dir kept for the job and the checks.

    python tests/helpers/kafka4.py install     # .ci/run: fetch the jars, compile the client

`install` resolves `org.apache.kafka:kafka_2.13` with Maven into
`~/.cache/kafka-compaction/kafka-<version>/libs` (`KAFKA4_CACHE` moves the parent) and compiles
`Kafka4Client.java` against them; nothing is downloaded after that. A test calls `require()`: it
is skipped locally when the jars are not there, and fails under `CI=true`, where `.ci/run` fetches
them.

Every process started here is stopped by its PID: SIGTERM (the broker's clean shutdown, which
writes `.kafka_cleanshutdown`), SIGKILL after a timeout, and again at interpreter exit.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import envkit

VERSION = "4.4.0"  # the newest Kafka release Maven Central serves at the time of writing
SCALA = "2.13"
CACHE = (
    Path(os.environ.get("KAFKA4_CACHE") or Path.home() / ".cache" / "kafka-compaction") / f"kafka-{VERSION}"
)
LIBS = CACHE / "libs"
CLASSES = CACHE / "classes"
COMPLETE = LIBS / ".complete"  # written last by install(): a half-filled cache is never used
HERE = Path(__file__).resolve().parent
CLIENT_SRC = HERE / "Kafka4Client.java"
CLUSTER_ID = "kCmpTst4QzKq0bLr7vXy1w"  # any 16 bytes in URL-safe base64: one cluster per root dir
# A small JVM: the tests' partitions are a few MiB, and two cores are shared by everything.
TEST_JVM = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss1m")
BENCH_JVM = ("-Xms2g", "-Xmx2g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20")
COMMON_JVM = ("-Djava.awt.headless=true", "-Duser.language=en", "-Duser.country=US")
POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.kafka-compaction</groupId><artifactId>kafka-broker-jars</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_{scala}</artifactId><version>{version}</version></dependency>
    <!-- the broker logs through slf4j 1.7; log4j2's binding for it, as Kafka's own distribution ships -->
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.25.5</version></dependency>
  </dependencies>
</project>
"""
LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d{ISO8601}] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = org.apache.kafka.clients
logger.kafka.level = WARN
"""
# What a broker's log says when it loads a partition it does not trust as it is (LogLoader,
# LogSegment.recover, the index sanity checks, producer state replayed from segments): none of these
# may appear for a log the job wrote. (Every load logs "Reloading from producer snapshot and
# rebuilding producer state from offset N" with N the log end offset: nothing is replayed.)
RECOVERY_LINES = re.compile(
    r"Recovering unflushed segment|Rebuilding index|Found a corrupted index|Found invalid|"
    r"Deleting segment files|[Tt]runcat|Could not find offset index|[Cc]orrupt|Recovering segment|"
    r"interrupted swap|unclean shutdown|ERROR|Exception"
)
PRODUCER_STATE = re.compile(r"partition=(\S+), .*(till|rebuilding producer state from) offset (\d+)")
_RUNNING: dict[int, subprocess.Popen] = {}


class KafkaHarnessError(RuntimeError):
    """The broker or a client did not do what the harness asked (with the log's tail)."""


def java_classpath() -> str:
    return f"{CLASSES}{os.pathsep}{LIBS}/*"


def missing() -> str | None:
    """Why the harness cannot run here, or None."""
    for tool in ("java", "javac"):
        if not shutil.which(tool):
            return f"{tool} is not on PATH"
    if not COMPLETE.exists():
        return f"Kafka {VERSION}'s jars are not in {LIBS} (run: python tests/helpers/kafka4.py install)"
    if not (CLASSES / "Kafka4Client.class").exists():
        return f"Kafka4Client is not compiled in {CLASSES} (run: python tests/helpers/kafka4.py install)"
    return None


def require() -> None:
    """Skip the calling test when the harness cannot run (fail it under CI=true)."""
    envkit.need(f"Kafka {VERSION} broker tests", missing(), ".ci/run installs them")


def install() -> None:
    """Fetch the broker's jars with Maven (once) and compile the client against them."""
    if not COMPLETE.exists():
        envkit.maven_copy(POM.format(scala=SCALA, version=VERSION), CACHE, LIBS)
    out = CLASSES / "Kafka4Client.class"
    if not out.exists() or out.stat().st_mtime < CLIENT_SRC.stat().st_mtime:
        CLASSES.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["javac", "-nowarn", "-cp", f"{LIBS}/*", "-d", str(CLASSES), str(CLIENT_SRC)], check=True
        )
    print(f"Kafka {VERSION}: jars in {LIBS}, client in {CLASSES}")


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM (a clean shutdown) when the process that started it dies,
    also by a signal that skips atexit (prctl PR_SET_PDEATHSIG, Linux)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_pid(proc: subprocess.Popen, timeout: float) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _RUNNING.pop(proc.pid, None)
    return proc.returncode


@atexit.register
def _stop_all() -> None:
    for proc in list(_RUNNING.values()):
        _stop_pid(proc, 30)


def active_segment_base(part_dir: Path) -> int:
    return max(int(p.name.split(".")[0]) for p in part_dir.glob("*.log"))


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """`<topic> <partition> <offset>` entries of a checkpoint file (empty when absent)."""
    if not path.exists():
        return {}
    lines = path.read_text().split("\n")
    if len(lines) < 2 or not lines[1]:
        return {}  # the broker creates it empty before its first round
    out = {}
    for line in lines[2 : 2 + int(lines[1])]:
        topic, part, offset = line.split(" ")
        out[(topic, int(part))] = int(offset)
    return out


@dataclass
class Broker:
    """One Kafka broker+controller on `root`: `root/kafka-logs` is the data log dir (what the job
    cleans), `root/metadata` the KRaft metadata log, `root/logs/broker-N.log` the output of the
    N-th start."""

    root: Path
    configs: dict
    jvm: tuple = TEST_JVM
    timeout: float = 120.0

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.starts = 0

    @property
    def log_dir(self) -> Path:
        return self.root / "kafka-logs"

    @property
    def log_path(self) -> Path:
        return self.root / "logs" / f"broker-{self.starts}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _properties(self, port: int, controller_port: int, extra: dict) -> str:
        props = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": self.log_dir,
            "metadata.log.dir": self.root / "metadata",
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0,
            "num.network.threads": 2,
            "num.io.threads": 2,
            "background.threads": 2,
            "num.recovery.threads.per.data.dir": 1,
            "log.cleaner.threads": 1,
            "log.cleaner.dedupe.buffer.size": 32 << 20,
            "auto.create.topics.enable": "false",
            "log.cleaner.enable": "false",
            **self.configs,
            **extra,
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def start(self, **extra) -> Broker:
        """Start (formatting the dirs on the first start) and wait until the broker serves.
        `extra` are configs for this start only, e.g. `{"log.cleaner.enable": "true"}`."""
        reason = missing()
        if reason:
            raise KafkaHarnessError(reason)
        assert self.proc is None, "already running"
        extra = {k.replace("_", "."): v for k, v in extra.items()}
        self.port, controller_port = free_port(), free_port()
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        props = self.root / "server.properties"
        props.write_text(self._properties(self.port, controller_port, extra))
        log4j = self.root / "log4j2.properties"
        log4j.write_text(LOG4J2)
        java = [
            "java",
            *self.jvm,
            *COMMON_JVM,
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            java_classpath(),
        ]
        if not (self.root / "metadata" / "meta.properties").exists():
            subprocess.run(
                [*java, "kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c", str(props)],
                check=True,
                capture_output=True,
                timeout=self.timeout,
            )
        self.starts += 1
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [*java, "kafka.Kafka", str(props)],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        _RUNNING[self.proc.pid] = self.proc
        deadline = time.monotonic() + self.timeout
        while "Kafka Server started" not in self.log_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise KafkaHarnessError(f"the broker did not start:\n{self.log_text()[-4000:]}")
            time.sleep(0.2)
        return self

    def stop(self) -> int | None:
        """SIGTERM and wait: a clean shutdown. Returns the exit code."""
        if self.proc is None:
            return None
        code = _stop_pid(self.proc, self.timeout)
        self.proc = None
        return code

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_text(self, start: int | None = None) -> str:
        path = self.root / "logs" / f"broker-{start or self.starts}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def run_client(self, script: Script | str, timeout: float = 300) -> list[str]:
        """Run Kafka4Client on the script; its stdout lines."""
        text = script.text() if isinstance(script, Script) else script
        path = self.root / "logs" / f"client-{time.monotonic_ns()}.txt"
        path.write_text(text)
        proc = subprocess.run(
            [
                "java",
                "-Xmx256m",
                "-XX:TieredStopAtLevel=1",
                *COMMON_JVM,
                f"-Dlog4j2.configurationFile={self.root / 'log4j2.properties'}",
                "-cp",
                java_classpath(),
                "Kafka4Client",
                self.bootstrap,
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise KafkaHarnessError(
                f"Kafka4Client failed ({proc.returncode}) on {path}:\n{proc.stderr[-4000:]}"
            )
        return proc.stdout.splitlines()

    def produce_fresh(self, script: Script | str, attempts: int = 2) -> list[str]:
        """Start on an empty root and run `script`; the broker left running. A broker on a loaded
        host (pytest-xdist beside Spark) has failed to answer a first client until its delivery
        timeout: then its root is wiped and it all runs again, up to `attempts` times, and the
        error carries every attempt's broker log."""
        tails = []
        for attempt in range(1, attempts + 1):
            try:
                self.start()
                return self.run_client(script)
            except (KafkaHarnessError, subprocess.TimeoutExpired) as err:
                tails.append(f"attempt {attempt}: {err}\nbroker log:\n{self.log_text()[-3000:]}")
                self.stop()
                shutil.rmtree(self.root, ignore_errors=True)
                self.starts = 0
        raise KafkaHarnessError("\n\n".join(tails))

    def consume(self, *topics: str) -> dict[tuple[str, int], list[tuple]]:
        """Every record a read_committed consumer reads from offset 0, per (topic, partition):
        (offset, timestamp, key, value, headers)."""
        script = Script()
        for topic in topics:
            script.consume(topic)
        out: dict[tuple[str, int], list[tuple]] = {}
        for line in self.run_client(script):
            f = line.split("\t")
            if f[0] == "record":
                headers = tuple(_header(h) for h in f[7:])
                record = (int(f[3]), int(f[4]), _bytes(f[5]), _bytes(f[6]), headers)
                out.setdefault((f[1], int(f[2])), []).append(record)
            elif f[0] == "end":
                out.setdefault((f[1], int(f[2])), [])
        return out

    def wait_cleaned(self, partitions: list[tuple[str, int]], timeout: float = 180) -> None:
        """Until the cleaner's checkpoint reaches the active segment's base of each partition."""
        deadline = time.monotonic() + timeout
        checkpoint = self.log_dir / "cleaner-offset-checkpoint"
        while True:
            done = read_checkpoint(checkpoint)
            todo = [
                tp
                for tp in partitions
                if done.get(tp, -1) < active_segment_base(self.log_dir / f"{tp[0]}-{tp[1]}")
            ]
            if not todo:
                return
            if self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
                raise KafkaHarnessError(
                    f"the cleaner did not reach the active segment of {todo}:\n{self.log_text()[-4000:]}"
                )
            time.sleep(0.3)


def _bytes(field: str) -> bytes | None:
    return None if field == "-" else bytes.fromhex(field)


def _header(field: str) -> tuple[str, bytes | None]:
    k, v = field.split("=", 1)
    return bytes.fromhex(k).decode(), _bytes(v)


def _hex(b: bytes | None) -> str:
    return "-" if b is None else b.hex()


class Script:
    """A Kafka4Client script (see Kafka4Client.java for the commands)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _add(self, *fields) -> Script:
        self.lines.append("\t".join(str(f) for f in fields))
        return self

    def topic(self, name: str, partitions: int, **configs) -> Script:
        return self._add(
            "topic", name, partitions, *(f"{k.replace('_', '.')}={v}" for k, v in configs.items())
        )

    def producer(self, name: str, **configs) -> Script:
        return self._add("producer", name, *(f"{k.replace('_', '.')}={v}" for k, v in configs.items()))

    def send(
        self,
        name: str,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
        headers: tuple = (),
    ) -> Script:
        hs = [f"{k.encode().hex()}={_hex(v)}" for k, v in headers]
        return self._add(
            "send",
            name,
            topic,
            partition,
            _hex(key),
            _hex(value),
            "-" if timestamp is None else timestamp,
            *hs,
        )

    def consume(self, topic: str) -> Script:
        return self._add("consume", topic)

    def alter(self, topic: str, **configs) -> Script:
        return self._add("alter", topic, *(f"{k.replace('_', '.')}={v}" for k, v in configs.items()))

    def workload(
        self,
        name: str,
        topic: str,
        partition: int,
        nbytes: int,
        keys: int,
        key_size: tuple[int, int],
        value_size: tuple[int, int],
        seed: int,
        tombstones: float = 0.0,
        text: bool = False,
    ) -> Script:
        """Keyed records until `nbytes` of keys and values were sent (Kafka4Client.workload)."""
        return self._add(
            "workload",
            name,
            topic,
            partition,
            nbytes,
            keys,
            *key_size,
            *value_size,
            seed,
            tombstones,
            "text" if text else "random",
        )

    def __getattr__(self, command: str):
        if command in ("init", "begin", "commit", "abort", "flush", "close"):
            return lambda name: self._add(command, name)
        raise AttributeError(command)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def load_problems(log: str, topics: list[str]) -> list[str]:
    """What a broker's log shows of it recovering or rebuilding one of the topics' logs while it
    loaded them (up to "Kafka Server started"): recovery lines, and producer state replayed from
    segments instead of loaded from the snapshot at the log end."""
    loading = log.split("Kafka Server started")[0].splitlines()
    mine = [line for line in loading if any(f"{t}-" in line for t in topics)]
    out = [line for line in mine if RECOVERY_LINES.search(line)]
    till: dict[str, str] = {}
    for line in mine:
        m = PRODUCER_STATE.search(line)
        if m and m.group(2) == "till":
            till[m.group(1)] = m.group(3)
        elif m and till.get(m.group(1)) != m.group(3):
            out.append(line)
    return out


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: kafka4.py install")
    install()
