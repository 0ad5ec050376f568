from __future__ import annotations

import inspect
import uuid
from pathlib import Path

import clickhouse_connect.driver.exceptions as driver_exceptions
import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope import semconv as sc
from streamscope.errors import ConfigError, RetryableWriteError, WriteError
from streamscope.int64_bytes import int64_bytes
from streamscope_ingest import store
from streamscope_ingest.blocks import columns
from streamscope_ingest.blocks.batch import DecodedBatch
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.store.writer import ClickHouseWriter
from tests.support import store_spans, stream_span, trace_request


def test_embedded_dsn():
    target = store.parse_dsn("chdb:///var/lib/ss?database=tenant_a")
    assert (target.engine, target.path, target.database) == ("chdb", Path("/var/lib/ss"), "tenant_a")
    assert store.parse_dsn("chdb:///x").database == store.DEFAULT_DATABASE


def test_an_embedded_database_is_made_on_first_connection_unless_the_account_may_not(chdb_dir, chdb_admin):
    database = f"made_{uuid.uuid4().hex[:8]}"
    missing = store.parse_dsn(f"chdb://{chdb_dir}?database={database}")
    with pytest.raises(WriteError, match="UNKNOWN_DATABASE"):
        store.connect(missing, create_database=False)
    client = store.connect(missing)
    try:
        assert client.query("SELECT currentDatabase()").result_rows == [(database,)]
        again = store.connect(missing, create_database=False)  # it is there now
        assert again.query("SELECT currentDatabase()").result_rows == [(database,)]
        again.close()
    finally:
        client.close()
        chdb_admin.command(f"DROP DATABASE {database} SYNC")


def test_server_dsn():
    target = store.parse_dsn("clickhouses://writer:p%40ss@ch.internal/metrics")
    assert (target.host, target.port, target.username, target.password, target.database, target.secure) == (
        "ch.internal",
        8443,
        "writer",
        "p@ss",
        "metrics",
        True,
    )
    assert store.parse_dsn("clickhouse://ch:9000").port == 9000


@pytest.mark.parametrize(
    ("dsn", "message"),
    [
        ("postgres://x", "unknown storage DSN"),
        ("chdb://relative/path", "absolute path"),
        ("clickhouse:///db", "needs a host"),
        ("clickhouse://h/drop table", "letters, digits and underscores"),
        ("chdb:///x?database=a;b", "letters, digits and underscores"),
        ("clickhouse://h:99999/db", "bad port"),
    ],
)
def test_bad_dsns_say_what_is_wrong(dsn, message):
    with pytest.raises(ConfigError, match=message):
        store.parse_dsn(dsn)


def test_every_driver_exception_is_mapped():
    """Like httpx's test for httpcore: a new driver exception must be placed in our tree on purpose."""
    mapped = store.RETRYABLE_DRIVER_ERRORS + store.PERMANENT_DRIVER_ERRORS
    for name, cls in inspect.getmembers(driver_exceptions, inspect.isclass):
        if issubclass(cls, Exception) and cls.__module__ == driver_exceptions.__name__:
            if issubclass(cls, Warning) and not issubclass(cls, driver_exceptions.Error):
                continue  # warnings are not raised as errors
            assert issubclass(cls, mapped), f"{name} is not mapped in streamscope_ingest.store"


def test_translation_keeps_retryable_apart():
    with pytest.raises(RetryableWriteError), store.translated_errors():
        raise driver_exceptions.OperationalError("connection refused")
    with pytest.raises(WriteError) as refused, store.translated_errors():
        raise driver_exceptions.DatabaseError("Code: 60. Unknown table\nstack")
    assert not isinstance(refused.value, RetryableWriteError)
    assert "Unknown table" in str(refused.value) and "stack" not in str(refused.value)
    for failing_disk in ("Code: 243. (NOT_ENOUGH_SPACE)", "Code: 1001. filesystem error (STD_EXCEPTION)"):
        with pytest.raises(RetryableWriteError, match="cannot take it now"), store.translated_errors():
            raise driver_exceptions.DatabaseError(failing_disk)


def test_for_the_writer_only_the_datas_own_faults_are_final():
    """An insert is retried through whatever the store can heal from: a table dropped, a grant missing, a closed
    client; only a code that names the rows is final."""
    with pytest.raises(WriteError) as refused, store.translated_errors(writing=True):
        raise driver_exceptions.DatabaseError("Code: 27. Cannot parse input\nstack")
    assert not isinstance(refused.value, RetryableWriteError)
    for store_side in (
        "Code: 60. Unknown table",
        "Code: 243. DB::Exception: Could not perform insert. (NOT_ENOUGH_SPACE)",
        "Code: 497. DB::Exception: streamscope_writer: Not enough privileges. (ACCESS_DENIED)",
    ):
        with pytest.raises(RetryableWriteError, match="cannot take it now"), store.translated_errors(writing=True):
            raise driver_exceptions.DatabaseError(store_side)
    with pytest.raises(RetryableWriteError), store.translated_errors(writing=True):
        raise driver_exceptions.ProgrammingError("The client has been closed")


def host_delayed_span(
    trace: int,
    host_delay_us: list[int],
    watch: str,
    host_held_us: list[int] | None = None,
    host_held_total_us: list[int] | None = None,
) -> Span:
    """A client stream of a chunk every 300 ms, with the host delays (and holds, longest and summed) its SDK measured
    and the watch it used."""
    span = stream_span(
        trace,
        1,
        side="client",
        offsets_ms=[300 * (i + 1) for i in range(len(host_delay_us))],
        tokens=[1] * len(host_delay_us),
    )
    span.attributes.extend(
        [
            KeyValue(key=sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US, value=AnyValue(bytes_value=int64_bytes(host_delay_us))),
            KeyValue(key=sc.STREAMSCOPE_HOST_WATCH, value=AnyValue(string_value=watch)),
        ]
    )
    if host_held_us is not None:
        held = AnyValue(bytes_value=int64_bytes(host_held_us))
        span.attributes.append(KeyValue(key=sc.STREAMSCOPE_CHUNKS_HOST_HELD_US, value=held))
    if host_held_total_us is not None:
        total = AnyValue(bytes_value=int64_bytes(host_held_total_us))
        span.attributes.append(KeyValue(key=sc.STREAMSCOPE_CHUNKS_HOST_HELD_TOTAL_US, value=total))
    return span


def test_host_delays_and_the_watch_round_trip_through_the_store(store_client):
    store_spans(
        store_client,
        [
            host_delayed_span(1, [120_000, 0, 290_000], "asyncio", [0, 0, 310_000], [0, 0, 400_000]),
            host_delayed_span(2, [0, 0], "thread"),
            stream_span(3, 1, side="server", offsets_ms=[1, 2], tokens=[1, 1]),
        ],
    )
    timeline = store_client.query(
        "SELECT trace_id, groupArray(host_delay_us), groupArray(host_held_us), groupArray(host_held_total_us), "
        "groupArray(offset_us) FROM (SELECT * FROM chunk_timeline ORDER BY seq) GROUP BY trace_id ORDER BY trace_id"
    ).result_rows
    assert timeline == [
        (f"{1:032x}", [120_000, 0, 290_000], [0, 0, 310_000], [0, 0, 400_000], [300_000, 600_000, 900_000]),
        (f"{2:032x}", [0, 0], [0, 0], [0, 0], [300_000, 600_000]),
        (f"{3:032x}", [0, 0], [0, 0], [0, 0], [1_000, 2_000]),
    ]
    watches = store_client.query("SELECT trace_id, host_watch FROM streams ORDER BY trace_id").result_rows
    assert watches == [(f"{1:032x}", "asyncio"), (f"{2:032x}", "thread"), (f"{3:032x}", "")]


def test_chunks_written_without_host_delays_read_zeros_one_a_chunk(store_client):
    """Rows a collector of an earlier version writes have no host_delay_us: the store gives them zeros as long as
    their other arrays, so the chunks view unrolls them. A batch it left in the spool, written by this version,
    reads the same."""

    def decoded(span: Span) -> DecodedBatch:
        return decode_traces(trace_request([span]), tenant="t")

    def as_earlier(batch: DecodedBatch) -> DecodedBatch:
        new = {"host_delay_us", "host_held_us", "host_held_total_us", "host_watch"}
        batch.blocks = {
            name: block.drop_columns([c for c in block.column_names if c in new])
            for name, block in batch.blocks.items()
        }
        return batch

    earlier_collector = as_earlier(decoded(stream_span(4, 1, side="client", offsets_ms=[1, 2, 3], tokens=[1, 1, 1])))
    for table in ("chunk_arrays", "streams"):
        store_client.insert_arrow(table, earlier_collector.blocks[table])
    writer = ClickHouseWriter(store_client)
    writer.write([as_earlier(decoded(stream_span(5, 1, side="client", offsets_ms=[1, 2], tokens=[1, 1])))])
    writer.write([decoded(host_delayed_span(6, [7], "thread"))])
    rows = store_client.query(
        "SELECT trace_id, groupArray(host_delay_us) FROM (SELECT * FROM chunks ORDER BY seq) GROUP BY trace_id "
        "ORDER BY trace_id"
    ).result_rows
    assert rows == [(f"{4:032x}", [0, 0, 0]), (f"{5:032x}", [0, 0]), (f"{6:032x}", [7])]
    watches = store_client.query("SELECT host_watch FROM streams ORDER BY trace_id").result_rows
    assert watches == [("",), ("",), ("thread",)]


def test_a_tool_calls_pause_is_kept_with_its_stream_and_unknown_for_streams_decoded_before(store_client):
    """The gap before the chunk at first_tool_call_seq; a batch an earlier version left in the spool has no such
    column, and its stream reads NULL (its tool call is still there)."""
    tool_call = {sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK: 3}
    offsets = [10, 20, 30, 450, 460]

    def decoded(trace: int) -> DecodedBatch:
        span = stream_span(trace, 1, side="client", offsets_ms=offsets, tokens=[1] * 5, attributes=tool_call)
        return decode_traces(trace_request([span]), tenant="t")

    earlier = decoded(1)
    earlier.blocks["streams"] = earlier.blocks["streams"].drop_columns(["tool_call_pause_us"])
    ClickHouseWriter(store_client).write([earlier, decoded(2)])
    rows = store_client.query("SELECT first_tool_call_seq, tool_call_pause_us FROM streams ORDER BY trace_id")
    assert rows.result_rows == [(3, None), (3, 420_000)]


def test_chunk_columns_of_zeros_are_left_to_their_default(store_client):
    """The writer leaves out of its insert a defaulted chunk column that is zero throughout, and empties a stream's
    array of zeros in the others; the store keeps an empty array, which the chunks view reads as the same zeros, one
    a chunk. A stream with one value keeps its array whole."""
    quiet = stream_span(1, 1, side="client", offsets_ms=[10, 20, 30], tokens=[1, 1, 1])
    held = stream_span(2, 2, side="client", offsets_ms=[10, 400], tokens=[1, 1])
    held.attributes.append(
        KeyValue(key=sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US, value=AnyValue(bytes_value=int64_bytes([0, 250_000])))
    )
    batch = decode_traces(trace_request([quiet, held]), tenant="t")
    block = batch.blocks["chunk_arrays"]
    left_out = set(block.column_names) - set(columns.without_zero_defaults(block).column_names)
    assert left_out == {
        "paint_delay_us",
        "render_us",
        "host_held_us",
        "host_held_total_us",
        "retracted_bytes",
        "retracted_tokens",
    }

    ClickHouseWriter(store_client).write([batch])
    rows = store_client.query(
        "SELECT host_delay_us, host_held_us, retracted_bytes, retracted_tokens, paint_delay_us FROM chunk_arrays "
        "ORDER BY span_id_bytes"
    ).result_rows
    assert rows == [([], [], [], [], []), ([0, 250_000], [], [], [], [])]
    through_the_view = store_client.query(
        "SELECT span_id, groupArray(host_delay_us), groupArray(host_held_us), groupArray(retracted_bytes), "
        "groupArray(retracted_tokens), groupArray(paint_delay_us) FROM (SELECT * FROM chunks ORDER BY seq) "
        "GROUP BY span_id ORDER BY span_id"
    ).result_rows
    assert through_the_view == [
        (f"{1:016x}", [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]),
        (f"{2:016x}", [0, 250_000], [0, 0], [0, 0], [0, 0], [0, 0]),
    ]


def test_a_group_of_requests_writes_its_chunks_as_one_compact_part(store_client):
    """An insert of a group of requests is tens of MiB of chunks: written as one compact part (one file for all its
    columns), not a wide one (two files a column), which costs an insert more to create."""
    spans = [
        stream_span(trace, 1, side="client", offsets_ms=range(1, 1001), tokens=[1] * 1000) for trace in range(1, 901)
    ]
    ClickHouseWriter(store_client).write([decode_traces(trace_request(spans), tenant="t")])
    parts = store_client.query(
        "SELECT part_type, data_uncompressed_bytes FROM system.parts "
        "WHERE database = currentDatabase() AND table = 'chunk_arrays' AND active"
    ).result_rows
    assert [kind for kind, _ in parts] == ["Compact"]
    assert parts[0][1] > 10 * 2**20  # above the engine's default threshold for a wide part


WRITES_WITHOUT_PANDAS = """
import sys
from streamscope_ingest import store
from streamscope_ingest.store import migrations
client = store.connect(store.parse_dsn(sys.argv[1]))
migrations.migrate(client)  # a row per migration, inserted
client.insert("attribution_progress", [["job", 0]], column_names=["job", "through"])
print("pandas" in sys.modules)
"""

DATAFRAMES_WHEN_IMPORTED = """
import sys
import pandas
from streamscope_ingest import store
client = store.connect(store.parse_dsn(sys.argv[1]))
client.command("CREATE TABLE t (a UInt8) ENGINE = Memory")
client.insert_df("t", pandas.DataFrame({"a": [1, 2]}))
print(client.query_df("SELECT sum(a) AS s FROM t")["s"][0])
"""


def test_a_process_that_writes_does_not_import_pandas_unless_it_did(tmp_path):
    """Rows and Arrow tables only: pandas (a second of CPU and ~50 MiB) stays out of the collector and the CLI; a
    program that imported it keeps clickhouse-connect's DataFrames."""
    import subprocess
    import sys

    for script, store_dir, said in ((WRITES_WITHOUT_PANDAS, "a", "False"), (DATAFRAMES_WHEN_IMPORTED, "b", "3")):
        dsn = f"chdb://{tmp_path / store_dir}"
        run = subprocess.run([sys.executable, "-c", script, dsn], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.split() == [said], run.stdout
