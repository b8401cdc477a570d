"""The launcher: `kafka-compaction compact [options]` and `./spark-submit.sh [options]` (a thin
wrapper around this module).

It splits the command line into Spark's options and the job's, checks the job's options and log
dirs and finds Java and `spark-submit` (a usage error exits 2 before any JVM starts, having
written nothing), then replaces itself with `spark-submit` (exec: the process id, signals and the
exit code are Spark's driver's). `--help` and `--version` need neither Java nor Spark.

The Spark settings a round needs (`spark_settings`) are built here once, for this launcher and
for the Airflow DAG's `SparkSubmitOperator` (compaction/airflow.py), so none is copied by hand.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass, field

from compaction.cli.options import VERSION, build_parser, check_options, parse_unchecked
from compaction.cli.preflight import check_round, find_java
from compaction.cli.progress import TTY_ENV
from compaction.errors import UsageError

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # compaction/
APPLICATION = os.path.join(PACKAGE_DIR, "job.py")  # the file spark-submit runs on the driver
LOG4J_CONFIG = os.path.join(PACKAGE_DIR, "log4j2.properties")
APP_NAME = "kafka-offline-compaction"
# The driver JVM compiles with C1 only and collects with the serial collector. It schedules the
# round's tasks and carries their small results; the records never pass through it (the Python
# workers read and write the files). C2's optimising compiles of Spark's start-up code and G1's
# concurrent threads cost CPU seconds (a quarter of a small round's CPU: BENCHMARKS.md, the design choices' table)
# that such a JVM never earns back, and they compete with the Python workers for the same cores
# in local mode.
DRIVER_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
ZIP_NAME = "compaction.zip"

# spark-submit's own options (SparkSubmitArguments / SparkSubmitOptionParser), passed through as
# `--opt value` or `--opt=value`; everything else is the job's.
SPARK_OPTIONS = (
    "--master",
    "--deploy-mode",
    "--conf",
    "--properties-file",
    "--name",
    "--jars",
    "--packages",
    "--exclude-packages",
    "--repositories",
    "--files",
    "--archives",
    "--py-files",
    "--driver-memory",
    "--driver-cores",
    "--driver-java-options",
    "--driver-library-path",
    "--driver-class-path",
    "--executor-memory",
    "--executor-cores",
    "--num-executors",
    "--total-executor-cores",
    "--queue",
    "--principal",
    "--keytab",
    "--proxy-user",
)
SPARK_FLAGS = ("--verbose", "--supervise")

EXIT_CODES = (
    (0, "every partition was cleaned or skipped by policy (or nothing was eligible)"),
    (1, "at least one partition failed (named in the log and the report); the others were cleaned"),
    (2, "usage error, held lock or malformed checkpoint: nothing was written"),
    (
        75,
        "the round itself failed (a Spark job aborted, Spark did not start, a commit failed): the "
        "report says why and names every partition not committed as failed; rerun the round",
    ),
    ("other", "from Spark itself (e.g. 52: the driver ran out of memory); the next run recovers"),
)
ENVIRONMENT = (
    ("SPARK_MASTER", "the master when --master is not given (default local[*])"),
    ("SPARK_HOME", "the Spark whose bin/spark-submit runs (default: the pyspark package's own)"),
    ("JAVA_HOME", "the Java 17+ Spark runs on (default: java on the PATH)"),
    ("PYSPARK_PYTHON", "the executors' Python (default: the Python running this launcher)"),
    (
        "NUMBA_CACHE_DIR",
        "where compiled kernels are cached on a host (default $TMPDIR/kafka-compaction-numba; "
        "passed to the executors when set, or with a local master)",
    ),
    ("NUMPY_MADVISE_HUGEPAGE", "set to 0 for driver and executors unless given (see docs/configuration.md)"),
    ("SPARK_APP_NAME", f"the Spark application name (default {APP_NAME})"),
    (
        "KAFKA_COMPACTION_DIST_DIR",
        "where the executors' zip of the package is built (default: the "
        "checkout's dist/, or ~/.cache/kafka-compaction)",
    ),
    ("KAFKA_COMPACTION_SHIP_ZIP", "1: ship the zip to executors with a local master too"),
    (
        "KAFKA_COMPACTION_CDS_DIR",
        "where the driver JVM's class-data archive is kept (default "
        "~/.cache/kafka-compaction/jvm); off: none",
    ),
)


@dataclass
class CommandLine:
    """A launcher command line split into Spark's part and the job's."""

    master: str | None = None
    deploy_mode: str | None = None
    spark_args: list[str] = field(default_factory=list)  # without --master / --deploy-mode
    conf: list[str] = field(default_factory=list)  # the `--conf` values, `key=value`
    job_args: list[str] = field(default_factory=list)


def split_argv(argv: list[str]) -> CommandLine:
    """Spark's options (either form) go to spark-submit, the rest to the job; `--` ends Spark's."""
    out = CommandLine()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            out.job_args += argv[i + 1 :]
            break
        name, eq, inline = arg.partition("=")
        if name in SPARK_OPTIONS:
            if eq:
                value = inline
            elif i + 1 < len(argv):
                i += 1
                value = argv[i]
            else:
                raise UsageError(f"{name} needs a value")
            if name == "--master":
                out.master = value
            elif name == "--deploy-mode":
                out.deploy_mode = value
            else:
                if name == "--conf":
                    out.conf.append(value)
                out.spark_args += [name, value]
        elif arg in SPARK_FLAGS:
            out.spark_args.append(arg)
        else:
            out.job_args.append(arg)
        i += 1
    return out


# --- the Spark settings of a round ---------------------------------------------------------------


@dataclass(frozen=True)
class SparkSettings:
    """What spark-submit needs besides the job's own arguments."""

    master: str
    application: str
    name: str
    conf: dict[str, str]
    env: dict[str, str]  # for the spark-submit process (the driver)
    py_files: tuple[str, ...] = ()


def is_local(master: str) -> bool:
    return master.startswith("local")


def package_root() -> str:
    """The directory that holds the `compaction` package (a checkout, or site-packages)."""
    return os.path.dirname(PACKAGE_DIR)


def _installed() -> bool:
    paths = sysconfig.get_paths()
    return os.path.realpath(package_root()) in {os.path.realpath(paths[k]) for k in ("purelib", "platlib")}


def spark_settings(
    master: str | None = None,
    *,
    python: str | None = None,
    env: dict | None = None,
    user_conf: list[str] | tuple[str, ...] = (),
    dist_dir: str | None = None,
    deploy_mode: str | None = None,
    driver_python: str | None = None,
) -> SparkSettings:
    """The settings of a round on `master` (else $SPARK_MASTER, else local[*]): the Python of the
    executors, the kernel cache, Spark's console progress off, our log4j configuration and the
    driver's JIT and collector (unless `user_conf` sets the driver's Java options), and how
    executors import the package: from its directory with a local master (numba's cache of
    compiled kernels is then hit across workers and runs; the workers are forked from the
    package's daemon), else from a zip shipped with --py-files (built only when the sources
    changed).
    The driver runs on this launcher's Python (client mode): `python` may be a path inside an
    archive only the executors unpack (`./environment/bin/python`)."""
    env = dict(os.environ if env is None else env)
    master = master or env.get("SPARK_MASTER") or "local[*]"
    python = python or env.get("PYSPARK_PYTHON") or sys.executable
    numba_cache = env.get("NUMBA_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "kafka-compaction-numba")
    hugepage = env.get("NUMPY_MADVISE_HUGEPAGE", "0")
    conf = {
        "spark.pyspark.python": python,
        # numpy's transparent-huge-page advice: see docs/configuration.md ("Environment").
        "spark.executorEnv.NUMPY_MADVISE_HUGEPAGE": hugepage,
        # Progress is the job's own (compaction/cli/progress.py): Spark's bar would garble it.
        "spark.ui.showConsoleProgress": "false",
    }
    if is_local(master) or env.get("NUMBA_CACHE_DIR"):
        # A cluster's executors keep their kernels in their own temp dir (kernels/cache.py), not
        # in a path of the driver's host.
        conf["spark.executorEnv.NUMBA_CACHE_DIR"] = numba_cache
    if not any(c.startswith("spark.driver.extraJavaOptions=") for c in user_conf):
        conf["spark.driver.extraJavaOptions"] = (
            f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG} {DRIVER_JVM_OPTIONS}"
        )
    driver_python = driver_python or env.get("PYSPARK_DRIVER_PYTHON") or sys.executable
    if deploy_mode != "cluster":  # else the driver runs where the executors do, on their Python
        conf["spark.pyspark.driver.python"] = driver_python
    run_env = {
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": driver_python,
        "NUMBA_CACHE_DIR": numba_cache,
        "NUMPY_MADVISE_HUGEPAGE": hugepage,
        "SPARK_HOME_SUBMITTED": "1",
    }
    if not _installed():  # a checkout: the driver (and local workers) import this very package
        run_env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), env.get("PYTHONPATH")) if p)
    ship = not is_local(master) or env.get("KAFKA_COMPACTION_SHIP_ZIP", "0") == "1"
    py_files = (ensure_zip(dist_dir or default_dist_dir(env)),) if ship else ()
    if not ship:
        # The kernels loaded once, before the workers are forked (compaction/spark/daemon.py). Only
        # where the daemon can import the package: a shipped zip reaches the workers, not it.
        conf["spark.python.daemon.module"] = "compaction.spark.daemon"
    return SparkSettings(master, APPLICATION, env.get("SPARK_APP_NAME") or APP_NAME, conf, run_env, py_files)


def default_dist_dir(env: dict) -> str:
    if env.get("KAFKA_COMPACTION_DIST_DIR"):
        return env["KAFKA_COMPACTION_DIST_DIR"]
    root = package_root()
    if not _installed() and os.path.exists(os.path.join(root, "pyproject.toml")):
        return os.path.join(root, "dist")
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "kafka-compaction")


def _package_sources() -> list[tuple[str, str]]:
    """(path in the zip, path on disk) of the package's Python files, sorted."""
    out = []
    for root, dirs, files in os.walk(PACKAGE_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                out.append((os.path.relpath(path, package_root()), path))
    return out


def ensure_zip(dist_dir: str) -> str:
    """`dist_dir/compaction.zip` of the package, rewritten only when a source file changed (the
    zip's comment holds a digest of the sources' names and bytes): spark-submit sees the same file,
    and a rebuild never races a run that is shipping it (replaced by rename)."""
    sources = _package_sources()
    digest = hashlib.sha256()
    for arc, path in sources:
        with open(path, "rb") as fh:
            digest.update(arc.encode() + b"\0" + fh.read() + b"\0")
    stamp = digest.hexdigest().encode()
    target = os.path.join(dist_dir, ZIP_NAME)
    try:
        with zipfile.ZipFile(target) as zf:
            if zf.comment == stamp:
                return target
    except (OSError, zipfile.BadZipFile):
        pass
    os.makedirs(dist_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=ZIP_NAME + ".", dir=dist_dir)
    try:
        with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
            for arc, path in sources:
                zf.write(path, arc)
            zf.comment = stamp
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    return target


def find_spark_submit(python: str, env: dict, *, ask_python: bool = False) -> str:
    """$SPARK_HOME's spark-submit, else the pyspark package's own (of this interpreter, or with
    `ask_python` of `python`'s), else the PATH's."""
    home = env.get("SPARK_HOME")
    if home and os.access(os.path.join(home, "bin", "spark-submit"), os.X_OK):
        return os.path.join(home, "bin", "spark-submit")
    pyspark_dir = _pyspark_dir_of(python) if ask_python else None
    if not ask_python:
        spec = importlib.util.find_spec("pyspark")
        if spec is not None and spec.submodule_search_locations:
            pyspark_dir = next(iter(spec.submodule_search_locations))
    if pyspark_dir:
        submit = os.path.join(pyspark_dir, "bin", "spark-submit")
        if os.access(submit, os.X_OK):
            return submit
    found = shutil.which("spark-submit", path=env.get("PATH"))
    if found is None:
        raise UsageError(f"no spark-submit found: set SPARK_HOME or install pyspark into {python}")
    return found


def _pyspark_dir_of(python: str) -> str | None:
    import subprocess

    try:
        out = subprocess.run(
            [python, "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def submit_command(
    cl: CommandLine, env: dict | None = None, java: str | None = None, pid: int | None = None
) -> tuple[list[str], dict[str, str]]:
    """The spark-submit command line and environment for `cl` (its job options already checked),
    run by process `pid` (this one, which execs it) on `java`."""
    env = dict(os.environ if env is None else env)
    settings = spark_settings(cl.master, env=env, user_conf=cl.conf, deploy_mode=cl.deploy_mode)
    submit = find_spark_submit(settings.conf["spark.pyspark.python"], env)
    if java and cl.deploy_mode != "cluster" and "spark.driver.extraJavaOptions" in settings.conf:
        settings.conf["spark.driver.extraJavaOptions"] += "".join(
            " " + o for o in driver_archive_options(env, java, submit, os.getpid() if pid is None else pid)
        )
    cmd = [submit, "--master", settings.master, "--name", settings.name]
    if cl.deploy_mode:
        cmd += ["--deploy-mode", cl.deploy_mode]
    args = list(cl.spark_args)
    py_files = list(settings.py_files)
    while "--py-files" in args:  # the user's --py-files join ours (spark-submit keeps only the last)
        at = args.index("--py-files")
        py_files.append(args[at + 1])
        del args[at : at + 2]
    if py_files:
        cmd += ["--py-files", ",".join(py_files)]
    for key, value in settings.conf.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd += [*args, settings.application, *cl.job_args]
    return cmd, {**env, **settings.env}


def driver_archive_options(env: dict, java: str, submit: str, pid: int) -> list[str]:
    """The driver JVM's class-data archive options (compaction/cli/class_archive.py), unless
    KAFKA_COMPACTION_CDS_DIR turns it off or names a dir Spark's option string cannot carry."""
    from compaction.cli import class_archive  # Storage, pyarrow: not in the launcher's import

    cache_dir = env.get("KAFKA_COMPACTION_CDS_DIR", class_archive.default_dir(env))
    if cache_dir.strip().lower() in class_archive.DISABLED or any(c in cache_dir for c in " \t\n'\"\\"):
        return []
    spark_home = os.path.dirname(os.path.dirname(os.path.realpath(submit)))
    return class_archive.java_options(cache_dir, class_archive.archive_key(java, spark_home), pid)


def operator_settings(
    master: str,
    python: str | None = None,
    env: dict | None = None,
    user_conf: dict[str, str] | None = None,
    *,
    executor_python: str | None = None,
    deploy_mode: str | None = None,
) -> dict:
    """The keyword arguments of Airflow's `SparkSubmitOperator` for a round on `master`, driver and
    executors on `python` (a Python with this package's dependencies; default this one; the
    executors on `executor_python` when given, e.g. `./environment/bin/python` of a packed
    environment shipped with `spark.archives`): the same settings as this launcher's, and
    spark-submit (found from `python`'s pyspark or SPARK_HOME) first on the PATH the operator runs
    it with (it runs `spark-submit` by name)."""
    env = dict(os.environ if env is None else env)
    python = python or sys.executable
    settings = spark_settings(
        master,
        python=executor_python or python,
        driver_python=python,
        env=env,
        user_conf=[f"{k}={v}" for k, v in (user_conf or {}).items()],
        deploy_mode=deploy_mode,
    )
    submit = find_spark_submit(python, env, ask_python=True)
    path = os.pathsep.join((os.path.dirname(submit), env.get("PATH", os.defpath)))
    run_env = {**settings.env, "PATH": path}
    return {
        "application": settings.application,
        "conf": {**settings.conf, **(user_conf or {})},
        "py_files": ",".join(settings.py_files) or None,
        "env_vars": run_env,
        "name": settings.name,
        "spark_binary": "spark-submit",
    }


# --- help ----------------------------------------------------------------------------------------


def help_epilog() -> str:
    spark = ", ".join(SPARK_OPTIONS + SPARK_FLAGS)
    codes = "\n".join(f"  {code:<6} {text}" for code, text in EXIT_CODES)
    envs = "\n".join(f"  {name:<26} {text}" for name, text in ENVIRONMENT)
    return (
        "Spark options, passed to spark-submit as '--opt value' or '--opt=value' (anything after '--'\n"
        f"goes to the job):\n  {_wrap(spark, 96)}\n\n"
        f"Exit codes:\n{codes}\n\nEnvironment:\n{envs}\n"
    )


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n  ".join(textwrap.wrap(text, width))


def print_help(prog: str) -> None:
    parser = build_parser(prog=f"{prog} --log-dir DIR [options] [spark options]", epilog=help_epilog())
    parser.usage = f"{prog} --log-dir DIR [--log-dir DIR ...] [options] [spark options]"
    parser.print_help()


# --- main ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None, prog: str = "kafka-compaction compact") -> int:
    """Check, then exec spark-submit. Returns only on a usage error (2) or after --help/--version."""
    argv = list(sys.argv[1:] if argv is None else argv)
    before_sep = argv[: argv.index("--")] if "--" in argv else argv
    if "-h" in before_sep or "--help" in before_sep:
        print_help(prog)
        return 0
    if "--version" in before_sep:
        print(VERSION)
        return 0
    env = dict(os.environ)
    try:
        cl = split_argv(argv)
        opts = check_options(parse_unchecked(cl.job_args, prog))  # argparse's errors exit 2 here
        if cl.deploy_mode != "cluster":  # in cluster mode the driver's host reads the paths, not this one
            check_round(opts)

        cmd, run_env = submit_command(cl, env, java=find_java(env))
        if cl.deploy_mode != "cluster" and os.isatty(sys.stdout.fileno()):
            # spark-submit pipes the driver's output to its own stdout, this terminal: the driver
            # cannot see that it may draw a live bar there.
            run_env[TTY_ENV] = "1"
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(cmd[0], cmd, run_env)
    return 0  # not reached


if __name__ == "__main__":  # ./spark-submit.sh: `python -m compaction.cli.launcher --prog NAME ...`
    args = sys.argv[1:]
    name = "kafka-compaction compact"
    if args[:1] == ["--prog"] and len(args) > 1:
        name, args = args[1], args[2:]
    sys.exit(main(args, prog=name))
