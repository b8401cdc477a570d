"""`python -m compaction <command>` (also the `kafka-compaction` console script).

Each command lives in its own module exposing `add_arguments(parser)` and `run(args) -> int`;
adding a command is one line in COMMANDS. `compact` (the launcher) takes its command line as is,
Spark's options included: its module exposes `main(argv, prog)`. Modules are imported only when
their command runs
or when the parser is built, and keep their heavy imports (numba kernels, pyspark) inside
functions, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from compaction.cli.options import VERSION, SuggestingParser

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "compact": ("compaction.cli.launcher", "run one compaction round with spark-submit (see compact --help)"),
    "dump": ("compaction.tools.dump", "print .log/.index/.timeindex/.txnindex contents like kafka-dump-log"),
    "generate": ("compaction.tools.generator", "write a synthetic broker-like Kafka log dir"),
    "export": (
        "compaction.cli.export",
        "write the compacted state of log dirs as Parquet (per topic and partition)",
    ),
}


# Commands whose arguments are not argparse's to parse (the launcher passes Spark's through).
PASSTHROUGH = {"compact"}


def build_parser() -> argparse.ArgumentParser:
    parser = SuggestingParser(prog="kafka-compaction", description="Offline Kafka log compaction tools.")
    parser.add_argument("--version", action="version", version=VERSION)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        if name in PASSTHROUGH:
            commands.add_parser(name, help=help_text, add_help=False)
            continue
        module = importlib.import_module(module_name)
        sub = commands.add_parser(
            name,
            help=help_text,
            description=getattr(module, "DESCRIPTION", help_text),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.add_argument("--version", action="version", version=VERSION)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in PASSTHROUGH:
        module = importlib.import_module(COMMANDS[argv[0]][0])
        return module.main(argv[1:], prog=f"kafka-compaction {argv[0]}")
    args = build_parser().parse_args(argv)
    try:
        return args._run(args)
    except BrokenPipeError:  # `... | head` closed the pipe: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0


if __name__ == "__main__":
    sys.exit(main())
