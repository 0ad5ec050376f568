"""Each `streamscope` subcommand imported from its own module and run in-process on a real embedded store, so a
command can be tested without the group or a subprocess. The store is a database of the session's engine: a process
opens one embedded engine directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner, Result

from streamscope_cli import main
from streamscope_cli.commands.dashboards import dashboards
from streamscope_cli.commands.migrate import migrate
from streamscope_cli.commands.report import report
from streamscope_cli.commands.sql import sql

TOP_LEVEL = (
    "collector",
    "migrate",
    "retention",
    "sql",
    "tenant-grants",
    "spool",
    "demo",
    "chat",
    "load",
    "engine",
    "llama",
    "proxy",
    "gateway",
    "eval",
    "bench",
    "compare",
    "report",
    "replay",
    "gpu-agent",
    "dashboards",
)
HEAVY = ("numpy", "pyarrow", "clickhouse_connect", "chdb", "streamscope_collector", "streamscope_gpu_agent")
"""What the commands import only when they run, so that `streamscope --help` answers at once."""


def invoke(command: click.Command, *args: str) -> Result:
    return CliRunner().invoke(command, list(args))


def assert_ended_plainly(result: Result) -> None:
    """Exited through click, not through an exception the runner caught (which also reads as exit code 1)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output


def test_migrate_applies_then_reports_up_to_date(empty_storage_dsn: str) -> None:
    dsn = empty_storage_dsn
    first = invoke(migrate, "--storage", dsn)
    assert first.exit_code == 0, first.output
    applied = first.output.splitlines()
    assert applied and all(line.startswith("applied ") for line in applied)
    assert "applied 0001_streams.sql" in applied
    again = invoke(migrate, "--storage", dsn)
    assert again.exit_code == 0, again.output
    assert again.output == "schema is up to date\n"


def migrated(dsn: str) -> str:
    assert invoke(migrate, "--storage", dsn).exit_code == 0
    return dsn


def test_sql_refuses_a_bad_query_in_one_line(empty_storage_dsn: str) -> None:
    result = invoke(sql, "SELECT (1 +", "--storage", migrated(empty_storage_dsn))
    assert result.exit_code == 1
    assert_ended_plainly(result)
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: ") and "Syntax error" in line


def test_sql_prints_a_good_query(empty_storage_dsn: str) -> None:
    result = invoke(sql, "SELECT 1 AS one", "--storage", migrated(empty_storage_dsn), "--format", "tsv")
    assert result.exit_code == 0, result.output
    assert result.stdout == "one\n1\n"


def test_report_refuses_a_duration_it_cannot_read_as_a_usage_error(tmp_path: Path) -> None:
    result = invoke(report, "--since", "nonsense", "--storage", f"chdb://{tmp_path / 'db'}")
    assert result.exit_code == 2
    assert_ended_plainly(result)
    assert "Invalid value for --since" in result.stderr
    assert not (tmp_path / "db").exists()  # refused before opening the store


def test_dashboards_push_is_a_subcommand_with_its_envvars() -> None:
    result = invoke(dashboards, "push", "--help")
    assert result.exit_code == 0, result.output
    for envvar in ("GRAFANA_URL", "GRAFANA_TOKEN", "GRAFANA_CLICKHOUSE_PASSWORD"):
        assert envvar in result.output


def test_the_group_lists_every_command() -> None:
    result = invoke(main.cli, "--help")
    assert result.exit_code == 0, result.output
    section = result.output.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]  # the epilog follows a blank line
    listed = {match[1] for match in re.finditer(r"^  (\S+)", section, re.MULTILINE)}  # not wrapped help lines
    assert listed == set(TOP_LEVEL)
    assert set(main.cli.commands) == set(TOP_LEVEL)


def test_help_loads_no_store_engine_or_service() -> None:
    probe = (
        "import sys\n"
        "from streamscope_cli.main import cli\n"
        "try:\n"
        "    cli(['--help'], prog_name='streamscope')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    loaded = set(done.stderr.split())
    assert "click" in loaded
    assert not loaded & set(HEAVY), f"streamscope --help loads {sorted(loaded & set(HEAVY))}"
