#!/usr/bin/env bash
# Launch one offline compaction round with spark-submit.
#
#   ./spark-submit.sh --log-dir /data/kafka-logs [--log-dir ...] [job options] [spark options]
#
# Spark options (--master, --conf, --deploy-mode, --driver-memory, --executor-memory,
# --executor-cores, --num-executors, --total-executor-cores, --name, --queue, --jars,
# --packages, --files, --archives, --properties-file, --driver-java-options, --verbose) are
# passed to spark-submit; everything else goes to the job (see `--help`). The master defaults
# to $SPARK_MASTER, else local[*]. The exit code is the job's: 0 when every partition was
# cleaned or skipped by policy, 1 when one failed, 2 on a usage or checkpoint error.
#
# Environment: SPARK_HOME (else the pyspark package's own spark-submit is used), PYSPARK_PYTHON
# (the executors' Python; default: this repo's .venv, else python3), NUMBA_CACHE_DIR.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

python="${PYSPARK_PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$here/.venv/bin/python" ]]; then python="$here/.venv/bin/python"; else python="$(command -v python3)"; fi
fi

if [[ -n "${SPARK_HOME:-}" && -x "$SPARK_HOME/bin/spark-submit" ]]; then
  submit="$SPARK_HOME/bin/spark-submit"
else
  pyspark_dir="$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null || true)"
  if [[ -n "$pyspark_dir" && -x "$pyspark_dir/bin/spark-submit" ]]; then
    submit="$pyspark_dir/bin/spark-submit"
  elif command -v spark-submit >/dev/null; then
    submit="$(command -v spark-submit)"
  else
    echo "spark-submit.sh: no spark-submit found (set SPARK_HOME or install pyspark into $python)" >&2
    exit 2
  fi
fi

# The package goes to the executors as a zip: --py-files only puts .zip/.egg/.py on their path.
dist="$here/dist"
mkdir -p "$dist"
zip="$dist/compaction.zip"
(cd "$here" && "$python" - "$zip" <<'PY'
import os, sys, zipfile
target = sys.argv[1]
tmp = target + ".tmp"
with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
    for root, dirs, files in os.walk("compaction"):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in sorted(files):
            if name.endswith(".py"):
                zf.write(os.path.join(root, name))
os.replace(tmp, target)
PY
)

master="${SPARK_MASTER:-local[*]}"
log4j_conf=(--conf "spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:$here/jobs/log4j2.properties")
spark_args=()
job_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --master) master="$2"; shift 2 ;;
    --master=*) master="${1#*=}"; shift ;;
    --conf)
      [[ "$2" == spark.driver.extraJavaOptions=* ]] && log4j_conf=()
      spark_args+=("$1" "$2"); shift 2 ;;
    --deploy-mode|--driver-memory|--executor-memory|--executor-cores|--num-executors|\
    --total-executor-cores|--name|--queue|--jars|--packages|--files|--archives|--properties-file|\
    --driver-java-options|--driver-cores)
      spark_args+=("$1" "$2"); shift 2 ;;
    --verbose) spark_args+=("$1"); shift ;;
    --) shift; job_args+=("$@"); break ;;
    *) job_args+=("$1"); shift ;;
  esac
done

numba_cache="${NUMBA_CACHE_DIR:-${TMPDIR:-/tmp}/kafka-compaction-numba}"
export PYSPARK_PYTHON="$python"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$python}"
export NUMBA_CACHE_DIR="$numba_cache"
# numpy asks for transparent huge pages on every array of 4 MiB or more; the kernel then faults
# in and zeroes 2 MiB at a time, compacting memory to find them. On the 2-vCPU VM of bench/ that
# cost 2.6 s of system time per GiB of fresh arrays against 0.4 s with 4 KiB pages (BENCHMARKS.md,
# session 3): more than a whole-partition task's own CPU. Off unless the caller says otherwise.
export NUMPY_MADVISE_HUGEPAGE="${NUMPY_MADVISE_HUGEPAGE:-0}"
export SPARK_HOME_SUBMITTED=1

# Where executors import the package from. A local master runs its Python workers on this host:
# they import the repo's package dir (PYTHONPATH), so numba's on-disk cache of the compiled
# kernels (keyed on the source files' path and mtime) is hit by every worker of every run. From
# the zip that spark-submit copies into a fresh per-application dir, every Python worker of
# every run would compile the kernels again (seconds per worker). Clusters get the zip.
# KAFKA_COMPACTION_SHIP_ZIP=1 forces the zip (tests of the cluster path).
ship=(--py-files "$zip")
if [[ "$master" == local* && "${KAFKA_COMPACTION_SHIP_ZIP:-0}" != 1 ]]; then
  ship=()
  export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
fi

exec "$submit" \
  --master "$master" \
  --name "${SPARK_APP_NAME:-kafka-offline-compaction}" \
  ${ship[@]+"${ship[@]}"} \
  --conf "spark.pyspark.python=$python" \
  --conf "spark.executorEnv.NUMBA_CACHE_DIR=$numba_cache" \
  --conf "spark.executorEnv.NUMPY_MADVISE_HUGEPAGE=$NUMPY_MADVISE_HUGEPAGE" \
  --conf "spark.sql.execution.arrow.pyspark.enabled=true" \
  --conf "spark.ui.showConsoleProgress=false" \
  "${log4j_conf[@]}" \
  "${spark_args[@]}" \
  "$here/jobs/compact.py" "${job_args[@]}"
