#!/usr/bin/env bash
# Launch one offline compaction round with spark-submit: the launcher of a checkout, for cron and
# clusters. The same launcher is the installed `kafka-compaction compact` (compaction/cli/launcher.py);
# see `./spark-submit.sh --help` for the options, the Spark options passed through, the exit codes
# and the environment.
#
#   ./spark-submit.sh --log-dir /data/kafka-logs [--log-dir ...] [job options] [spark options]
#
# The launcher runs on $PYSPARK_PYTHON, else this checkout's .venv, else python3; that Python is
# also the executors' unless PYSPARK_PYTHON says otherwise.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYSPARK_PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$here/.venv/bin/python" ]]; then python="$here/.venv/bin/python"; else python="$(command -v python3)"; fi
fi
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m compaction.cli.launcher --prog ./spark-submit.sh "$@"
