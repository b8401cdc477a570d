"""Every error in a config file (`--config`, `--topic-config`; JSON or .properties) is a usage
error: exit 2, one line naming the file, the line or JSON path, and the key, quoting at most ~200
characters of the value; never a traceback. Kafka's types: an INT/LONG config takes an integer
(not 1.5, not 1e3, not NaN), within its range."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.cli.options import check_options, parse_args, parse_unchecked
from compaction.errors import UsageError
from compaction.settings import JobOptions

HUGE = "9" * 100_000


def _error(tmp_path, capsys, option: str, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(SystemExit) as exc:
        parse_args(["--log-dir", "x", option, str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err[:2000]
    assert len(err) < 600, err[:2000]
    return err.replace(str(tmp_path) + "/", "")


@pytest.mark.parametrize(
    "option, name, content, message",
    [
        (
            "--topic-config",
            "t.json",
            '{"orders": {"segment.bytes": 1e309}}',
            't.json at $["orders"]["segment.bytes"]: segment.bytes=inf is not an integer',
        ),
        (
            "--config",
            "s.json",
            '{"log.segment.bytes": 1e309}',
            's.json at $["log.segment.bytes"]: log.segment.bytes=inf is not an integer',
        ),
        (
            "--topic-config",
            "t.json",
            '{"orders": {"min.cleanable.dirty.ratio": 1e309}}',
            't.json at $["orders"]["min.cleanable.dirty.ratio"]: min.cleanable.dirty.ratio=inf is outside [0, 1]',
        ),
        (
            "--topic-config",
            "t.json",
            "[" * 100_000 + "]" * 100_000,
            "t.json: not a config: JSON nested too deep",
        ),
        (
            "--config",
            "s.json",
            '{"a": ' * 100_000 + "1" + "}" * 100_000,
            "s.json: not a config: JSON nested too deep",
        ),
        (
            "--topic-config",
            "t.json",
            '{"orders": {"segment.bytes": 1048576.5}}',
            't.json at $["orders"]["segment.bytes"]: segment.bytes=1048576.5 is not an integer',
        ),
        (
            "--topic-config",
            "t.json",
            '{"orders": {"delete.retention.ms": NaN}}',
            't.json at $["orders"]["delete.retention.ms"]: delete.retention.ms=nan is not an integer',
        ),
        (
            "--topic-config",
            "t.json",
            '{"orders": {"min.cleanable.dirty.ratio": NaN}}',
            "min.cleanable.dirty.ratio=nan is outside [0, 1]",
        ),
        (
            "--topic-config",
            "t.json",
            '{"orders": {"segment.bytes": true}}',
            "segment.bytes=True is not an integer",
        ),
        ("--topic-config", "t.json", '{"orders": {"cleanup.policy": 7}}', "cleanup.policy=7 is not a list"),
        (
            "--topic-config",
            "t.json",
            '{"orders": {"max.message.bytes": 2147483648}}',
            "max.message.bytes=2147483648 is outside [0, 2147483647]",
        ),
        ("--topic-config", "t.json", "[1, 2]", "t.json: expected a JSON object, not list"),
        (
            "--topic-config",
            "t.json",
            '{"orders": {"segment.bytes": 1}',
            "t.json line 1 column 32: not JSON: Expecting",
        ),
        ("--topic-config", "t.json", '{"orders": {"segment.bytes": ' + HUGE + "}}", "t.json: not JSON: "),
        (
            "--topic-config",
            "t.properties",
            "orders.segment.bytes=1\n" + "x" * 100_000_0 + "\n",
            "t.properties line 2: expected <name>=<value>: 'xxxx",
        ),
        (
            "--config",
            "s.properties",
            "broker.id=1\nlog.segment.bytes=-1\n",
            "s.properties line 2: log.segment.bytes='-1' is outside [14, 2147483647]",
        ),
        (
            "--config",
            "s.properties",
            "log.cleaner.min.cleanable.ratio=NaN\n",
            "s.properties line 1: log.cleaner.min.cleanable.ratio='NaN' is outside [0, 1]",
        ),
        (
            "--config",
            "s.properties",
            "log.cleaner.delete.retention.ms=" + HUGE + "\n",
            "s.properties line 1: log.cleaner.delete.retention.ms='99999",
        ),
        (
            "--config",
            "s.properties",
            "log.cleaner.delete.retention.ms=1.5\n",
            "retention.ms='1.5' is not an integer",
        ),
        (
            "--config",
            "s.properties",
            "log.cleaner.delete.retention.ms=1e3\n",
            "retention.ms='1e3' is not an integer",
        ),
        (
            "--config",
            "s.properties",
            b"broker.id=1\nlog.segment.bytes=\xff\xfe\x00garbage\n",
            "s.properties line 2: not UTF-8 text (byte 30",
        ),
        (
            "--config",
            "s.properties",
            "log.cleaner.io.max.bytes.per.second=-1\n",
            "s.properties line 1: log.cleaner.io.max.bytes.per.second='-1' is not a positive rate",
        ),
        (
            "--config",
            "s.properties",
            "log.cleaner.io.max.bytes.per.second=NaN\n",
            "'NaN' is not a positive rate",
        ),
        (
            "--topic-config",
            "t.properties",
            "orders.segment.bytes=-1\n",
            "t.properties line 1: orders.segment.bytes='-1' is outside [14, 2147483647]",
        ),
    ],
)
def test_config_file_errors_are_one_line_naming_file_place_and_key(
    tmp_path, capsys, option, name, content, message
):
    err = _error(tmp_path, capsys, option, name, content)
    assert message in err, err


def test_a_huge_value_is_quoted_short(tmp_path, capsys):
    err = _error(
        tmp_path, capsys, "--config", "s.properties", "log.segment.bytes=" + "a" * 100_000_000 + "\n"
    )
    assert "s.properties line 1: log.segment.bytes='aaaa" in err and "... (100000000 characters)" in err


def test_a_flag_is_blamed_only_for_its_own_value(tmp_path, capsys):
    (tmp_path / "s.properties").write_text("log.segment.bytes=-1\n")
    with pytest.raises(SystemExit):
        parse_args(["--log-dir", "x", "--config", str(tmp_path / "s.properties")])
    assert "--segment-bytes" not in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--log-dir", "x", "--segment-bytes", "-1"])
    assert "--segment-bytes: segment.bytes=-1 is outside" in capsys.readouterr().err


def test_valid_integers_as_kafka_writes_them(tmp_path):
    (tmp_path / "s.properties").write_text(
        "log.segment.bytes= +1048576 \nlog.cleaner.delete.retention.ms=0\n"
    )
    (tmp_path / "t.json").write_text(
        json.dumps({"orders": {"segment.bytes": "2048", "max.message.bytes": 0}})
    )
    opts = parse_args(
        [
            "--log-dir",
            "x",
            "--config",
            str(tmp_path / "s.properties"),
            "--topic-config",
            str(tmp_path / "t.json"),
        ]
    )
    assert opts.broker_config["segment.bytes"] == "+1048576"
    assert opts.topic_config["orders"] == {"segment.bytes": "2048", "max.message.bytes": 0}


# --- any content: a config or a one-line usage error ------------------------------------------

CONFIG_NAMES = [
    "segment.bytes",
    "min.cleanable.dirty.ratio",
    "cleanup.policy",
    "delete.retention.ms",
    "max.message.bytes",
    "retention.ms",
    "log.segment.bytes",
    "log.cleaner.min.cleanable.ratio",
    "log.cleaner.io.max.bytes.per.second",
    "message.max.bytes",
    "segmnt.bytes",
    "log.bogus",
]
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=30)
    | st.sampled_from(["1", "-1", "0.5", "NaN", "compact", "1e309", "9" * 40]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(CONFIG_NAMES) | st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
JSON_DOCS = (
    st.dictionaries(
        st.sampled_from([*CONFIG_NAMES, "orders", "t.x"]) | st.text(max_size=8), JSON_VALUES, max_size=4
    )
    | JSON_VALUES
)
PROPERTY_LINES = st.lists(
    st.tuples(
        st.sampled_from(CONFIG_NAMES + ["orders." + n for n in CONFIG_NAMES]) | st.text(max_size=10),
        st.sampled_from(["=", ":", " ", "=="]),
        st.sampled_from(["1", "-1", "1.5", "NaN", "compact", "", "9" * 30, "0"]) | st.text(max_size=12),
    ),
    max_size=6,
)


def _outcome(tmp_path, option: str, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    try:
        opts = check_options(parse_unchecked(["--log-dir", "x", option, str(path)]))
    except UsageError as exc:
        text = f"error: {exc}"
        assert "\n" not in text and len(text) < 700, text[:1000]
        assert str(path) in text, text
        return
    assert isinstance(opts, JobOptions)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=JSON_DOCS, option=st.sampled_from(["--config", "--topic-config"]))
def test_any_json_is_a_config_or_a_one_line_usage_error(tmp_path, doc, option):
    _outcome(tmp_path, option, "c.json", json.dumps(doc).encode())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=PROPERTY_LINES, option=st.sampled_from(["--config", "--topic-config"]))
def test_any_properties_are_a_config_or_a_one_line_usage_error(tmp_path, lines, option):
    text = "".join(f"{k}{sep}{v}\n" for k, sep, v in lines)
    _outcome(tmp_path, option, "c.properties", text.encode("utf-8", "surrogatepass"))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.binary(max_size=200),
    option=st.sampled_from(["--config", "--topic-config"]),
    name=st.sampled_from(["c.json", "c.properties"]),
)
def test_any_bytes_are_a_config_or_a_one_line_usage_error(tmp_path, data, option, name):
    _outcome(tmp_path, option, name, data)
