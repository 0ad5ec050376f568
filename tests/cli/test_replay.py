"""`streamscope replay`: a stored stream served again over a real socket, to the real `openai` client and to an
EventSource-style GET, with its recorded byte lengths and no chunk earlier than its recorded time."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest
from click.testing import CliRunner

from streamscope.errors import StreamscopeError
from streamscope.sse import SSEDecoder
from streamscope_cli.main import cli
from streamscope_cli.replay import Pause, Recording, chunk_events, load_recording, replay_app, schedule, serve_replay
from streamscope_collector.serving import BackgroundServer
from streamscope_ingest.store import sql
from tests.support import store_spans, stream_span, wait_until

TRACE = f"{7:032x}"
CLIENT_SPAN, SERVER_SPAN = f"{1:016x}", f"{2:016x}"
OFFSETS_MS = [30, 50, 70, 90, 500, 520]
CONTENT = [0, 5, 12, 60, 7, 3]  # a role chunk first, then content; a 410 ms freeze before chunk 4


@pytest.fixture
def run(store_client):
    store_spans(
        store_client,
        [
            stream_span(7, 1, side="client", offsets_ms=OFFSETS_MS, tokens=[0, 1, 3, 15, 2, 1], content_bytes=CONTENT),
            stream_span(7, 2, side="server", offsets_ms=[5, 25], tokens=[1, 1]),
            stream_span(8, 1, side="client", offsets_ms=[10], tokens=[1]),
            stream_span(8, 2, side="client", offsets_ms=[20], tokens=[1]),
        ],
    )
    return lambda query: sql.parse_result(sql.query_json(store_client, query))


def test_a_recording_is_the_stored_timeline(run):
    assert load_recording(run, TRACE, "client") == Recording(
        TRACE, CLIENT_SPAN, "client", "", tuple(o * 1000 for o in OFFSETS_MS), tuple(CONTENT)
    )
    assert load_recording(run, TRACE, "server").span_id == SERVER_SPAN


@pytest.mark.parametrize(
    ("trace", "side", "span", "message"),
    [
        (TRACE, "browser", None, f"no browser stream in trace {TRACE} (its sides: client, server)"),
        (f"{9:032x}", "client", None, "no stream of that trace is stored"),
        (f"{8:032x}", "client", None, f"holds 2 client streams; pick one with --span-id: {1:016x}, {2:016x}"),
        ("7' OR 1=1 --", "client", None, "a trace id is 32 lowercase hex digits"),
        (TRACE, "client", "x' OR '1", "a span id 16"),
    ],
)
def test_what_cannot_be_replayed_is_said(run, trace, side, span, message):
    with pytest.raises(StreamscopeError) as raised:
        load_recording(run, trace, side, span)
    assert message in str(raised.value)


def test_pauses_push_their_chunk_and_every_later_one():
    recording = Recording(TRACE, CLIENT_SPAN, "client", "m", (30_000, 50_000, 70_000), (0, 5, 12))
    assert schedule(recording) == [(30_000, 0), (50_000, 5), (70_000, 12)]
    assert schedule(recording, [Pause(1, 200), Pause(2, 0.5), Pause(1, 100)]) == [
        (30_000, 0),
        (350_000, 5),
        (370_500, 12),
    ]
    with pytest.raises(StreamscopeError, match=r"the stream has 3 chunks .* no chunk 3 to pause before"):
        schedule(recording, [Pause(3, 10)])
    assert Pause.parse("12:1500") == Pause(12, 1500.0)
    for bad in ("12", "x:10", "-1:10", "3:-5", "3:inf"):
        with pytest.raises(ValueError, match="a pause is INDEX:MS"):
            Pause.parse(bad)


def test_each_event_carries_its_recorded_bytes_as_placeholder_text():
    recording = Recording(TRACE, CLIENT_SPAN, "client", "m", (1, 2, 3, 4), (0, 50, 0, 7))
    events = chunk_events(recording, schedule(recording))
    assert [at for at, _ in events] == [1, 2, 3, 4, 4, 4]
    decoded = [e for data in (d for _, d in events) for e in SSEDecoder().feed(data)]
    assert decoded[-1].data == "[DONE]"
    documents = [httpx.Response(200, content=e.data).json() for e in decoded[:-1]]
    deltas = [d["choices"][0]["delta"] for d in documents]
    assert deltas[0] == {"role": "assistant", "content": ""} and deltas[2] == {} and deltas[4] == {}
    assert [len(deltas[i]["content"].encode()) for i in (1, 3)] == [50, 7]
    assert deltas[3]["content"][0] == (deltas[1]["content"] * 2)[50 % 45]  # the text goes on where it stopped
    assert documents[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.fixture
def replaying(run):
    recording = load_recording(run, TRACE, "client")
    pauses = [Pause(4, 300)]
    server = BackgroundServer(replay_app(recording, pauses)).start()
    try:
        yield f"http://127.0.0.1:{server.port}", schedule(recording, pauses)
    finally:
        server.stop()


def test_the_openai_client_reads_the_recorded_rhythm(replaying):
    url, timing = replaying
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    sent = time.monotonic()
    stream = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}], stream=True)
    arrivals = [(time.monotonic() - sent, chunk.choices[0].delta.content) for chunk in stream]
    contents = [(text or "").encode() for _, text in arrivals[: len(timing)]]
    assert [len(c) for c in contents] == CONTENT
    assert len(arrivals) == len(timing) + 1  # and the finish event
    # the server holds each chunk until its moment, so none can arrive earlier (later is the host's business)
    early = [(i, at, due) for i, ((at, _), (due, _)) in enumerate(zip(arrivals, timing)) if at < due / 1e6 - 0.001]
    assert early == []
    assert timing[4][0] == (500 + 300) * 1000  # the freeze, 300 ms longer


def test_a_page_reads_it_as_an_event_stream_from_any_origin(replaying):
    url, timing = replaying
    headers = {"Origin": "http://page.example"}
    with httpx.stream("GET", f"{url}/v1/replay", headers=headers, timeout=10) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["access-control-allow-origin"] == "*"
        decoder = SSEDecoder()
        events = [e for data in response.iter_raw() for e in decoder.feed(data)]
    assert len(events) == len(timing) + 2
    refused = httpx.post(f"{url}/v1/chat/completions", json={"stream": False, "messages": []})
    assert refused.status_code == 400 and "a replay is a stream" in refused.json()["error"]["message"]
    assert httpx.get(url).json() | {"pauses": None} == {
        "trace_id": TRACE,
        "span_id": CLIENT_SPAN,
        "side": "client",
        "chunks": 6,
        "pauses": None,
    }


def test_the_command_serves_until_stopped_and_refuses_plainly(run, storage_dsn):
    recording = load_recording(run, TRACE, "client")
    said: list[str] = []
    stop = threading.Event()
    serving = threading.Thread(
        target=serve_replay, args=(recording, [], "127.0.0.1", 0), kwargs={"announce": said.append, "stop": stop}
    )
    serving.start()
    try:
        wait_until(lambda: said, "the replay to start", timeout_s=10)
        assert "6 chunks over 0.52 s" in said[0]
        url = said[0].split("POST ")[1].split()[0]
        assert url.endswith("/v1/chat/completions")
        assert httpx.post(url, json={}).text.endswith("data: [DONE]\n\n")
    finally:
        stop.set()
        serving.join(10)
    assert not serving.is_alive()

    runner = CliRunner()
    for args, status, message in [
        ([f"{9:032x}"], 1, "no stream of that trace is stored"),
        ([TRACE, "--pause", "4"], 2, "a pause is INDEX:MS"),
        ([TRACE, "--pause", "6:100"], 1, "no chunk 6 to pause before"),
        ([TRACE, "--side", "browser"], 1, "no browser stream"),
    ]:
        result = runner.invoke(cli, ["replay", *args, "--storage", storage_dsn, "--port", "0"])
        assert (result.exit_code, message in result.output, "Traceback" in result.output) == (status, True, False), (
            result.output
        )
