"""The streamscope command, run as real processes."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf.struct_pb2 import Struct

from streamscope_cli.engine.grpc_service import GENERATE, struct
from streamscope_cli.workload.scenario import load_scenario, plan
from tests.support import PROTOBUF, STREAMSCOPE, free_port, good_body, run, wait_until


def test_migrate_then_up_to_date(tmp_path):
    dsn = f"chdb://{tmp_path / 'store'}"
    first = run("migrate", "--storage", dsn)
    assert first.returncode == 0, first.stderr
    assert "applied 0001_streams.sql" in first.stdout and "applied 0002_chunks.sql" in first.stdout
    again = run("migrate", "--storage", dsn)
    assert again.stdout.strip() == "schema is up to date"


def test_migrate_prints_the_cluster_schema_for_review(tmp_path):
    """What ``--cluster`` would run, statement by statement, each with the settings it runs with; ClickHouse's
    parser reads every one (tests/ingest/store/test_cluster_schema.py checks them in depth)."""
    printed = run("migrate", "--cluster", "fleet", "--print")
    assert printed.returncode == 0, printed.stderr
    out = printed.stdout
    assert "-- 0001_streams.sql" in out and "-- 0027_retractions.sql" in out
    assert "CREATE TABLE IF NOT EXISTS streams_local ON CLUSTER fleet" in out
    assert "ENGINE = Distributed(fleet, currentDatabase(), streams_local, cityHash64(unhex(trace_id)));" in out
    assert "-- with distributed_foreground_insert=1 distributed_product_mode=local" in out
    single = run("migrate", "--print").stdout
    assert "ON CLUSTER" not in single and "CREATE TABLE IF NOT EXISTS streams\n" in single


def test_retention_is_shown_defaulted_and_set_per_table(tmp_path):
    dsn = f"chdb://{tmp_path / 'store'}"
    migrated = run("migrate", "--storage", dsn, "--retention-defaults")
    assert migrated.returncode == 0, migrated.stderr
    assert "chunk_arrays keeps 14 days" in migrated.stdout and "alerts keeps 365 days" in migrated.stdout
    changed = run("retention", "--storage", dsn, "--set", "chunk_arrays=7", "--set", "alerts=0")
    assert changed.returncode == 0, changed.stderr
    shown = {line.split()[0]: line.split(None, 1)[1] for line in changed.stdout.splitlines()}
    assert shown["chunk_arrays"].startswith("7 days") and shown["alerts"].startswith("everything")
    assert shown["streams"].startswith("30 days")
    again = run("migrate", "--storage", dsn, "--retention-defaults")  # a chosen TTL is kept; only alerts had none
    assert again.stdout.splitlines() == ["schema is up to date", "alerts keeps 365 days"]
    wrong = run("retention", "--storage", dsn, "--set", "chunks=3")
    assert wrong.returncode == 1 and "no retention for 'chunks'" in wrong.stderr and "Traceback" not in wrong.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("migrate", "--storage", "mysql://nope"), "unknown storage DSN"),
        (
            ("migrate", "--storage", "chdb:///tmp/streamscope-cli-none", "--cluster", "fleet"),
            "needs a ClickHouse server",
        ),
        (("sql", "SELECT 1", "--storage", "chdb:///tmp/streamscope-cli-none"), "no store at /tmp/streamscope-cli-none"),
        (
            ("sql", "SELECT 1", "--collector-url", "http://127.0.0.1:9", "--storage", "chdb:///tmp/streamscope-none"),
            "name the store with --storage",
        ),
        (("collector", "--spool-max-mib", "16", "--no-grpc"), "is below the largest request accepted"),
    ],
)
def test_mistakes_end_in_one_line_not_a_traceback(args, message):
    result = run(*args)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_collector_that_may_not_migrate_names_what_is_missing(tmp_path):
    fresh = f"chdb://{tmp_path / 'store'}"
    other = run("collector", "--storage", fresh, "--query-storage", f"{fresh}?database=other", "--no-grpc")
    assert other.returncode == 1 and "must name the same store and database" in other.stderr
    unmigrated = run("collector", "--storage", fresh, "--no-migrate", "--no-grpc", "--http-port", "0")
    assert unmigrated.returncode == 1 and "Traceback" not in unmigrated.stderr
    assert "streamscope does not exist" in unmigrated.stderr  # the database migrate creates


def test_help_shows_an_example():
    for command in ("collector", "migrate", "retention", "sql", "demo"):
        result = run(command, "--help")
        assert result.returncode == 0 and "Example:" in result.stdout


@pytest.fixture
def collector_process(tmp_path):
    data = tmp_path / "chdb"  # the default store where STREAMSCOPE_DATA_DIR is tmp_path
    process = subprocess.Popen(
        [*STREAMSCOPE, "collector", "--storage", f"chdb://{data}", "--http-port", "0", "--no-grpc"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    discovery = data / "collector.json"

    def started() -> bool:
        assert process.poll() is None, process.stdout.read()
        return discovery.exists()

    wait_until(started, "the collector to start", timeout_s=60, interval_s=0.1)
    yield data, json.loads(discovery.read_text())["http_url"]
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    assert process.returncode == 0
    assert not discovery.exists()


def test_sql_goes_through_the_collector_that_owns_the_embedded_store(collector_process):
    data, url = collector_process
    response = httpx.post(f"{url}/v1/traces", content=good_body(), headers=PROTOBUF)
    assert response.status_code == 200
    result = run("sql", "SELECT side, chunk_count FROM streams", "--storage", f"chdb://{data}", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"side": "client", "chunk_count": 3}]
    refused = run("sql", "INSERT INTO streams (tenant) VALUES ('x')", "--storage", f"chdb://{data}")
    assert refused.returncode == 1 and "only a single SELECT" in refused.stderr


def test_a_collectors_operator_token_goes_to_that_collector_alone(collector_process, tmp_path):
    """The token a collector writes beside its store is sent to that collector, never to another URL named with
    --collector-url; such a URL ends in a message that says how to name the store, or how to give that collector's
    own token (STREAMSCOPE_OPERATOR_TOKEN, which goes to the URL named and nowhere else)."""
    _, url = collector_process
    authorizations = []

    class Recording(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            authorizations.append(self.headers.get("authorization"))
            self.send_response(401)
            self.end_headers()

    owned_by_default = {"STREAMSCOPE_DATA_DIR": str(tmp_path)}

    def sql_elsewhere(**env_extra: str) -> subprocess.CompletedProcess[str]:
        """`streamscope sql` through --collector-url naming a recording server, not the store's collector."""
        other = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
        threading.Thread(target=other.serve_forever, daemon=True).start()
        try:
            return run("sql", "SELECT 1", "--collector-url", f"http://127.0.0.1:{other.server_port}",
                       env_extra={**owned_by_default, **env_extra})  # fmt: skip
        finally:
            other.shutdown()

    elsewhere = sql_elsewhere()
    assert authorizations == [] and elsewhere.returncode == 1
    assert f"owned by {url}" in elsewhere.stderr and "Traceback" not in elsewhere.stderr
    assert "STREAMSCOPE_OPERATOR_TOKEN" in elsewhere.stderr  # how to query a collector on another machine
    given = sql_elsewhere(STREAMSCOPE_OPERATOR_TOKEN="its-own")
    assert authorizations == ["Bearer its-own"] and given.returncode == 1 and "Traceback" not in given.stderr
    own = run("sql", "SELECT 1 AS one", "--collector-url", url, "--format", "json", env_extra=owned_by_default)
    assert own.returncode == 0 and json.loads(own.stdout) == [{"one": 1}], own.stderr


def test_demo_prints_the_distributions(tmp_path: Path):
    result = run("demo", "--streams", "16", "--storage", f"chdb://{tmp_path / 'demo'}", timeout=300)
    assert result.returncode == 0, result.stderr + result.stdout
    lines = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in result.stdout.splitlines()
        if line.count("│") == 3
    }
    mixed = load_scenario("mixed")
    planned = plan(replace(mixed, load=replace(mixed.load, streams=16)))  # prefill storms included
    assert lines["streams"] == str(len(planned))
    for metric in (
        "TTFT p50 / p95",
        "gap p50 / p95 / p99",
        "p99 across streams of per-stream p99",
        "ITL goodput (every gap within 400 ms)",
        "stored bytes per chunk, all tables",
        "injected causes (ground truth), by the stalls they made",
        "this machine's own pauses (not injected), by the stalls they made",
    ):
        assert metric in lines
    assert float(lines["stored bytes per chunk, all tables"].split()[0]) > 0  # (and how many parts, while they merge)
    injected = lines["injected causes (ground truth), by the stalls they made"]
    assert "chunking_regression 1" in injected and "client_host" not in injected  # mixed injects no host load
    # stalls, the unit of the attributed row: a cause that slowed content without a stall is not counted as one
    assert re.search(r"kv_pressure \d+ stalls", injected) and not re.search(r"kv_pressure \d+(,|$)", injected)
    # a slow first token is no stall: counted apart, in its own unit, beside its own attributed row
    assert not re.search(r"queue [1-9]\d* stalls", injected)
    assert "attributed slow starts (first token 1 s or more late)" in lines


@pytest.fixture
def serving():
    processes: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        process = subprocess.Popen([*STREAMSCOPE, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        processes.append(process)
        return process

    yield start
    for process in processes:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        assert process.returncode == 0, process.stdout.read()


def wait_http(url: str, process: subprocess.Popen) -> httpx.Response:
    """The first answer from ``url``, while ``process`` runs."""

    def answer() -> httpx.Response | None:
        assert process.poll() is None, process.stdout.read()
        try:
            return httpx.get(url, timeout=2)
        except httpx.TransportError:
            return None

    return wait_until(answer, f"{url} to answer", timeout_s=60, interval_s=0.1)


def announced(process: subprocess.Popen) -> tuple[str, str]:
    """The URL and the gRPC address the next line ``process`` prints names
    (``node-0: http://127.0.0.1:PORT (... metrics at /metrics, gRPC 127.0.0.1:PORT)``)."""
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r"(http://[\d.]+:\d+) .*gRPC ([\d.]+:\d+)", line)
    assert match, line
    return match.group(1), match.group(2)


def test_engine_and_proxy_commands_serve_until_signalled(serving):
    engine = serving(
        "engine", "--nodes", "2", "--port", "0", "--grpc-port", "0", "--flavor", "sglang", "--tokens-per-chunk", "2"
    )
    (upstream, _), (second, grpc_address) = announced(engine), announced(engine)  # each node on free ports
    assert wait_http(f"{second}/health", engine).json()["node"] == "node-1"
    with grpc.insecure_channel(grpc_address) as channel:
        call = channel.unary_stream(GENERATE, Struct.SerializeToString, Struct.FromString)
        assert [m["tokens"] for m in call(struct(prompt="hi", max_tokens=6)) if "text" in m] == [2, 2, 2]
    proxy_port = free_port()
    proxy = serving("proxy", "--upstream", upstream, "--port", str(proxy_port), "--scenario", "gateway-buffering")
    wait_http(f"http://127.0.0.1:{proxy_port}/health", proxy)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "stream": True}
    response = httpx.post(f"http://127.0.0.1:{proxy_port}/v1/chat/completions", json=body, timeout=30)
    contents = [
        json.loads(line[6:])["choices"][0]["delta"].get("content")
        for line in response.text.split("\n\n")
        if line.startswith("data: {")
    ]
    assert [len(c.split()) for c in contents if c] == [2, 2, 2]
    metrics = httpx.get(f"{upstream}/metrics").text
    assert "sglang:generation_tokens_total" in metrics


TINY_SCENARIO = """name: tiny
seed: 7
load:
  streams: 4
  arrival_rate: 20
  concurrency: 4
  prompt_tokens: {uniform: [50, 100]}
  output_tokens: {uniform: [10, 20]}
nodes:
  - name: node-0
"""


def test_load_with_no_collector_listening_exits_non_zero_and_counts_what_was_lost(tmp_path: Path):
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY_SCENARIO)
    result = run("load", str(scenario), "--collector", f"http://127.0.0.1:{free_port()}", timeout=180)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "4 completed" in result.stdout and "Traceback" not in result.stderr
    assert "not exported to http://127.0.0.1:" in result.stderr and "4 client stream spans" in result.stderr


def test_load_into_a_running_collector_exports_everything(tmp_path: Path, collector_process):
    _, url = collector_process
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY_SCENARIO)
    result = run("load", str(scenario), "--collector", url, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 completed" in result.stdout and "not exported" not in result.stderr


@pytest.mark.parametrize("flag", ["--http-port", "--grpc-port"])
def test_a_port_in_use_is_named_before_the_collector_touches_the_store(tmp_path: Path, flag: str):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    store = tmp_path / "store"
    other = ["--grpc-port", "0"] if flag == "--http-port" else ["--http-port", "0"]
    try:
        result = run("collector", "--storage", f"chdb://{store}", flag, str(port), *other, timeout=60)
    finally:
        taken.close()
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert not store.exists()  # nothing opened, nothing migrated


def test_piped_sql_output_is_whole_values_in_tsv_unless_asked_otherwise(tmp_path: Path):
    dsn = f"chdb://{tmp_path / 'store'}"
    assert run("migrate", "--storage", dsn).returncode == 0
    query = "SELECT repeat('x', 300) AS long, 7 AS n"
    piped = run("sql", query, "--storage", dsn)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.splitlines() == ["long\tn", f"{'x' * 300}\t7"]
    table = run("sql", query, "--storage", dsn, "--format", "table")
    assert table.returncode == 0 and "x" * 300 in table.stdout  # one cell, uncut, unwrapped
    assert max(len(line) for line in table.stdout.splitlines()) < 400  # laid out to its content, not padded


def test_sql_names_the_store_it_looked_for_and_never_creates_one(tmp_path: Path):
    data_dir = tmp_path / "data"
    assert run("migrate", "--storage", f"chdb://{data_dir / 'chdb'}").returncode == 0  # as STREAMSCOPE_DATA_DIR does
    wrong = run("sql", "SELECT count() FROM streams", "--storage", f"chdb://{data_dir}")
    assert wrong.returncode == 1 and f"--storage chdb://{data_dir / 'chdb'}" in wrong.stderr
    assert not (data_dir / "metadata").exists()
    bad = run("sql", "SELECT (1 +", "--storage", f"chdb://{data_dir / 'chdb'}")
    assert bad.returncode == 1 and "Syntax error" in bad.stderr
    empty = tmp_path / "empty"
    assert run("sql", "SELECT 1", "--storage", f"chdb://{empty}?database=other").returncode == 1
    assert not empty.exists()


def test_migrate_keeps_trying_a_store_that_does_not_answer_yet_for_as_long_as_it_is_given():
    from streamscope.errors import RetryableWriteError
    from streamscope_cli.commands.migrate import within

    now = [0.0]
    answers: list[object] = [RetryableWriteError("store unavailable: refused")] * 3 + ["client"]

    def attempt() -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def sleep(seconds: float) -> None:
        now[0] += seconds

    assert within(10, attempt, clock=lambda: now[0], sleep=sleep) == "client" and now[0] == 3
    answers[:] = [RetryableWriteError("store unavailable: refused")] * 20
    now[0] = 0.0
    with pytest.raises(RetryableWriteError, match=r"tried for 5 s"):
        within(5, attempt, clock=lambda: now[0], sleep=sleep)
    assert now[0] == 5


def test_migrate_against_nothing_listening_fails_plainly_after_its_wait(tmp_path: Path):
    dsn = f"clickhouse://admin:secret@127.0.0.1:{free_port()}/streamscope"
    result = run("migrate", "--storage", dsn, "--wait-s", "2")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "tried for 2 s" in result.stderr and "waiting for the store" in result.stderr


def test_the_collector_commands_defaults_are_its_configurations():
    """The command states its defaults where its help shows them; they must be the configuration's own."""
    from streamscope_cli.commands.collector import collector
    from streamscope_collector.config import CollectorConfig

    named = {param.name: param.default for param in collector.params}
    numbers = (int, float)
    configured = {
        name
        for name in CollectorConfig.__dataclass_fields__
        if isinstance(getattr(CollectorConfig, name, None), numbers)
    }
    shared = sorted(set(named) & configured)
    assert {"attribution_interval_s", "attribution_settle_s", "insert_interval_s", "store_wait_s"} <= set(shared)
    assert {name: named[name] for name in shared} == {name: getattr(CollectorConfig, name) for name in shared}
