"""The browser snippet end to end, in Debian's headless Chromium driven by Selenium: the demo chat page loads the
snippet from the collector (a cross-origin module, so CORS is exercised for real), streams an answer from the
simulated engine, and its browser span must reach ClickHouse joined to the engine's server span of the same
trace, with paint times a screen could have; a page that renders slowly must have its stall blamed on
``client_render``; a page whose main thread is busy with something else (a long task) must say so per chunk in
``streamscope.chunks.host_delay_us``.

Needs the packages chromium and chromium-driver (``.ci/run`` installs them; see tests/browser.py).
"""

from __future__ import annotations

import base64
import itertools
import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from streamscope._internal.json_progress import JsonProgress
from streamscope_cli.demo.chat import ChatServer, start_chat
from streamscope_cli.replay import Recording, replay_app
from streamscope_collector.service import Collector
from streamscope_collector.serving import BackgroundServer
from streamscope_ingest.analysis.attribution_job import AttributionJob
from tests import browser
from tests.support import free_port, int64s, wait_until

# Installed in a loaded page: keeps (as window.posted) the OTLP JSON of every span batch the snippet posts, as the
# collector receives it (gunzipped), then posts it unchanged.
CAPTURE_POSTS = """
    const original = window.fetch;
    window.posted = [];
    window.fetch = async function (input, init = {}) {
      const url = typeof input === "string" ? input : input.url;
      if (url.includes("/v1/browser/traces")) {
        let body = new Blob([init.body]).stream();
        const gzipped = (init.headers || {})["content-encoding"] === "gzip";
        if (gzipped) body = body.pipeThrough(new DecompressionStream("gzip"));
        window.posted.push(JSON.parse(await new Response(body).text()));
      }
      return original.call(this, input, init);
    };
"""


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory):
    with browser.chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


@pytest.fixture
def chat_stack(storage_dsn: str) -> Iterator[tuple[Collector, ChatServer]]:
    """A collector that lets exactly the chat page's origin in, and the chat page in front of an engine node."""
    port = free_port()
    collector = Collector(browser.collector_for_chat(storage_dsn, port)).start()
    chat = start_chat(collector.http_url, port=port)
    yield collector, chat
    chat.stop()
    collector.stop()


def open_chat_page(driver, chat: ChatServer) -> None:
    driver.get(chat.url)
    browser.wait_for_script(driver, "return window.chatReady === true", "the page")


def stored_browser_row(collector: Collector, trace_id: str, columns: str) -> tuple:
    """``columns`` of the browser stream of ``trace_id``, once the collector has stored it."""
    query = f"SELECT {columns} FROM streams WHERE trace_id = {{t:String}} AND side = 'browser'"
    rows = wait_until(
        lambda: collector.query_client.query(query, parameters={"t": trace_id}).result_rows, "the browser span", 20
    )
    return rows[0]


def _chat_posted(driver, url: str) -> tuple[str, dict[str, Any]]:
    """``browser.chat`` with the page's posts captured: the trace id and the browser span the snippet sent."""
    driver.get(url)
    browser.wait_for_script(driver, "return window.chatReady === true", "the page to load the snippet")
    driver.execute_script(CAPTURE_POSTS)
    driver.find_element("id", "send").click()
    browser.wait_for_script(driver, "return Boolean(window.chat && window.chat.done)", "the answer")
    trace_id = driver.execute_script("return window.chat.traceId")
    return trace_id, _posted_span(driver, trace_id)


def _posted_span(driver, trace_id: str) -> dict[str, Any]:
    posted = driver.execute_script("return window.posted")
    spans = [
        span
        for request in posted
        for resource in request["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
        if span["traceId"] == trace_id
    ]
    assert len(spans) == 1, f"{len(spans)} spans of trace {trace_id} posted"
    return {kv["key"]: next(iter(kv["value"].values())) for kv in spans[0]["attributes"]}


def _packed(attributes: dict[str, Any], key: str) -> list[int]:
    return int64s(base64.b64decode(attributes[key]))


def _stored_sides(collector: Collector, chat: ChatServer, trace_id: str) -> dict[str, tuple]:
    chat.traces.force_flush()
    query = (
        "SELECT side, span_id, parent_span_id, service, outcome, content_bytes, content_chunks, attributes "
        "FROM streams WHERE trace_id = {trace:String}"
    )
    rows: list[tuple] = []

    def both_stored() -> bool:
        nonlocal rows
        rows = collector.query_client.query(query, parameters={"trace": trace_id}).result_rows
        return {row[0] for row in rows} == {"browser", "server"}

    wait_until(both_stored, f"the browser and server spans of trace {trace_id}", 20, interval_s=0.1)
    return {row[0]: row[1:] for row in rows}


def test_the_browser_span_joins_the_server_span_with_plausible_paint_times(chromium, chat_stack) -> None:
    collector, chat = chat_stack
    trace_id, sent = _chat_posted(chromium, chat.url)
    sides = _stored_sides(collector, chat, trace_id)

    browser_span, _, service, outcome, content_bytes, content_chunks, attributes = sides["browser"]
    _, server_parent, _, _, server_bytes, server_chunks, _ = sides["server"]
    assert (service, outcome) == ("demo-chat", "completed")
    assert server_parent == browser_span  # the engine continued the page's traceparent
    assert content_bytes == server_bytes > 0  # the same answer seen from both ends
    assert content_chunks == server_chunks  # one chunk per server-sent event, as the server sent them
    assert int(attributes["streamscope.browser.frames_dropped"]) >= 0

    paint, render, painted, chunks = collector.query_client.query(
        "SELECT quantileExact(0.5)(paint_delay_us), quantileExact(0.5)(render_us), countIf(paint_delay_us > 0), "
        "count() FROM chunks WHERE trace_id = {trace:String} AND side = 'browser' AND content_bytes > 0",
        parameters={"trace": trace_id},
    ).result_rows[0]
    assert painted == chunks == content_chunks  # every content chunk reached a frame
    assert 0 < paint < 250_000  # arrival to paint: a frame or a few, not seconds
    assert render < paint  # the page's own work per chunk is a fraction of it

    # the page's main thread was free: what little of each wait went to long tasks is far below a stall
    assert sent["streamscope.host.watch"] == "longtask"
    host_delay = _packed(sent, "streamscope.chunks.host_delay_us")
    assert len(host_delay) == len(_packed(sent, "streamscope.chunks.offset_us"))
    assert max(host_delay) < 250_000


def test_a_busy_main_thread_is_reported_in_the_chunk_it_held_back(chromium, chat_stack) -> None:
    collector, chat = chat_stack
    # after the 20th chunk a timer runs 500 ms of other work on the main thread (no rendering): the next
    # chunks reach the network meanwhile, and the page reads them when the long task is over
    trace_id, sent = _chat_posted(chromium, f"{chat.url}?block_ms=500&block_at=20&max_tokens=200")
    blocked = chromium.execute_script("return window.chat.blocked")
    assert blocked, "the page's timer never ran its block"

    assert sent["streamscope.host.watch"] == "longtask"
    offsets = _packed(sent, "streamscope.chunks.offset_us")
    host_delay = _packed(sent, "streamscope.chunks.host_delay_us")
    assert len(host_delay) == len(offsets)
    gaps = [offsets[0]] + [b - a for a, b in itertools.pairwise(offsets)]
    assert all(0 <= delay <= gap + 1 for delay, gap in zip(host_delay, gaps, strict=True))  # a part of the wait
    after = next(i for i, offset in enumerate(offsets) if offset >= blocked["fromMs"] * 1000)
    assert 0 < after < len(offsets) - 1, "the block came after the stream, not in the middle of it"
    assert 300_000 <= host_delay[after] <= gaps[after]
    assert sum(host_delay) - host_delay[after] < 250_000  # the rest of the stream had the thread to itself

    _stored_sides(collector, chat, trace_id)
    stored = collector.query_client.query(
        "SELECT host_delay_us FROM chunk_timeline WHERE trace_id = {t:String} AND side = 'browser' ORDER BY seq",
        parameters={"t": trace_id},
    ).result_rows
    assert [delay for (delay,) in stored] == host_delay
    watch = collector.query_client.query(
        "SELECT host_watch FROM streams WHERE trace_id = {t:String} AND side = 'browser'", parameters={"t": trace_id}
    ).result_rows
    assert watch == [("longtask",)]


def test_a_long_task_is_not_hidden_by_a_short_one_after_it(chromium, chat_stack) -> None:
    """A page that works through a backlog after a long task may run another one just before it reads: the read
    waited out the long one (the snippet's own function, run in the browser on long tasks given by hand)."""
    collector, chat = chat_stack
    open_chat_page(chromium, chat)
    script = """
        const [url, done] = arguments;
        const tasks = { collect() {}, intervals: [[106, 272], [292, 295]] };
        import(url).then((sdk) => done([
            sdk.hostDelays(0, [301], tasks),  // the first chunk, waited for from the start
            sdk.hostDelays(0, [200, 301], tasks),  // the second: only the part of the task inside its wait
        ]));
    """
    first, second = chromium.execute_async_script(script, f"{collector.http_url}/sdk/streamscope.js")
    assert first == [166_000]
    assert second == [0, 72_000]


def test_a_browser_without_long_tasks_sends_no_host_evidence(chromium, chat_stack) -> None:
    _, chat = chat_stack
    open_chat_page(chromium, chat)
    chromium.execute_script(CAPTURE_POSTS)
    script = """
        const [done] = arguments;
        // as in a browser without the Long Tasks API (read when the page's first stream starts)
        Object.defineProperty(PerformanceObserver, "supportedEntryTypes", { value: ["mark", "measure"] });
        const scope = window.streamscope.init({ endpoint: "", service: "no-longtask" });
        const stream = scope.stream({ model: "m" });
        stream.chunk("Hello");
        stream.end("completed");
        setTimeout(() => scope.flush().then(() => done(stream.traceId)), 300);
    """
    trace_id = chromium.execute_async_script(script)
    sent = _posted_span(chromium, trace_id)
    assert "streamscope.chunks.render_us" in sent
    assert "streamscope.host.watch" not in sent
    assert "streamscope.chunks.host_delay_us" not in sent


def test_a_slow_renderer_is_blamed_on_client_render(chromium, chat_stack) -> None:
    collector, chat = chat_stack
    # 700 ms of main-thread work on the 25th read: the chunks have arrived, the screen cannot show them
    trace_id = browser.chat(chromium, f"{chat.url}?render_ms=700&render_every=25&max_tokens=200")
    _stored_sides(collector, chat, trace_id)

    AttributionJob(collector.query_client, settle_s=0).run_once(until=datetime.now(UTC))
    stalls = collector.query_client.query(
        "SELECT side, cause, gap_us, evidence FROM stalls WHERE trace_id = {trace:String}",
        parameters={"trace": trace_id},
    ).result_rows
    assert stalls, "the 700 ms render left no stall"
    assert {cause for _, cause, _, _ in stalls} == {"client_render"}
    side, _, gap_us, evidence = stalls[0]
    assert side == "browser"
    assert gap_us >= 600_000
    assert float(evidence["screen_part_ms"]) >= 0.5 * gap_us / 1000


def test_the_user_stopping_the_answer_is_a_cancelled_browser_stream(chromium, chat_stack) -> None:
    collector, chat = chat_stack
    chromium.get(f"{chat.url}?max_tokens=3000")
    browser.wait_for_script(chromium, "return window.chatReady === true", "the page")
    chromium.find_element("id", "send").click()
    shown = "return document.querySelector('[data-key=chunks]')?.textContent"
    wait_until(lambda: int(chromium.execute_script(shown) or 0) >= 20, "twenty chunks on screen", interval_s=0.1)
    chromium.find_element("id", "stop").click()
    browser.wait_for_script(chromium, "return Boolean(window.chat && window.chat.done)", "the stop")
    trace_id = chromium.execute_script("return window.chat.traceId")

    sides = _stored_sides(collector, chat, trace_id)
    _, _, _, outcome, _, chunks, _ = sides["browser"]
    assert outcome == "cancelled" and 20 <= chunks < 3000
    cancel_us, duration_us = collector.query_client.query(
        "SELECT cancel_offset_us, duration_us FROM streams WHERE trace_id = {t:String} AND side = 'browser'",
        parameters={"t": trace_id},
    ).result_rows[0]
    assert 0 < cancel_us <= duration_us
    assert sides["server"][3] != "completed"  # the engine saw its reader go away before the end


def test_an_app_that_feeds_chunks_itself_with_sampling_and_a_beacon_on_page_hide(chromium, chat_stack) -> None:
    collector, chat = chat_stack
    open_chat_page(chromium, chat)
    script = """
        const [endpoint, done] = arguments;
        const scope = window.streamscope.init({ endpoint, service: "fed-by-hand", flushIntervalMs: 60000 });
        const never = window.streamscope.init({ endpoint, service: "unsampled", sampleRate: 0 });
        const skipped = never.stream({ model: "m" });
        skipped.chunk("not kept");
        skipped.end("completed");
        const stream = scope.stream({ model: "m", transport: "websocket" });
        const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
        (async () => {
          for (const text of ["Hello", ", ", "world"]) { stream.chunk(text); await pause(30); stream.rendered(); }
          stream.end("completed");
          await pause(300);  // its last paint, then the span is queued (not sent: the interval is a minute)
          window.dispatchEvent(new Event("pagehide"));  // the page goes away: a beacon carries the queue
          const sampled = stream.headers().traceparent;
          done({ trace: stream.traceId, sampled, unsampled: skipped.headers().traceparent });
        })();
    """
    ids = chromium.execute_async_script(script, collector.http_url)
    assert ids["sampled"].endswith("-01") and ids["unsampled"].endswith("-00")

    query = "SELECT service, outcome, transport, content_chunks, content_bytes FROM streams WHERE side = 'browser'"
    wait_until(lambda: collector.query_client.query(query).result_rows, "the beacon's span", 10, interval_s=0.1)
    assert collector.query_client.query(query).result_rows == [("fed-by-hand", "completed", "websocket", 3, 12)]
    painted = collector.query_client.query(
        "SELECT countIf(paint_delay_us > 0) FROM chunks WHERE trace_id = {t:String}", parameters={"t": ids["trace"]}
    ).result_rows[0][0]
    assert painted == 3
    logged = "SELECT content_type, content_encoding FROM ingest_requests"  # written after the spans' tables
    wait_until(lambda: collector.query_client.query(logged).result_rows, "the beacon's request log", 10, interval_s=0.1)
    # text/plain, uncompressed: what sendBeacon sends without a preflight
    assert collector.query_client.query(logged).result_rows == [("json", "identity")]


def test_a_websocket_response_is_timed_message_by_message(chromium, chat_stack) -> None:
    """The page opens a WebSocket to the engine's Realtime-style endpoint and times one response through
    ``scope.websocket``: each message one chunk at the moment the page got it (after the app had read the message
    before, and before the app read this one: listeners of one message run before the next message's), its text
    deltas as content; another response the app stops reading after three messages is cancelled."""
    collector, chat = chat_stack
    open_chat_page(chromium, chat)
    script = """
        const [endpoint, url, done] = arguments;
        const scope = window.streamscope.init({ endpoint, service: "realtime-page" });
        const socket = new WebSocket(url);
        const next = () => new Promise((resolve) => socket.addEventListener("message", resolve, { once: true }));
        (async () => {
          await next();  // session.created: before any response
          const seen = [];
          const mine = (message) => seen.push([performance.now(), message.data]);
          const stream = scope.websocket(socket, { model: "sim-llm" });
          socket.addEventListener("message", mine);  // after the snippet's: the app's code reads each message later
          socket.send(JSON.stringify({ type: "response.create", response: { max_output_tokens: 12 } }));
          while (!stream.ended) await next();
          socket.removeEventListener("message", mine);
          const words = (data) => ({ text: JSON.parse(data).delta || "", done: false });
          const left = scope.websocket(socket, { model: "sim-llm", format: words });
          socket.send(JSON.stringify({ type: "response.create", response: { max_output_tokens: 400 } }));
          let taken = 0;
          while (taken < 3) { await next(); taken += 1; }
          left.end("cancelled");
          await scope.flush();
          socket.close();
          const arrived = seen.map(([at, data]) => [Math.round((at - stream.start) * 1000), data]);
          done({ trace: stream.traceId, left: left.traceId, arrived });
        })();
    """
    ws_url = chat.url.replace("http://", "ws://") + "engine/v1/realtime"
    ran = chromium.execute_async_script(script, collector.http_url, ws_url)
    arrived = ran["arrived"]
    kinds = [json.loads(data)["type"] for _, data in arrived]
    assert kinds[0] == "response.created" and kinds[-1] == "response.done"
    deltas = [json.loads(data)["delta"] for _, data in arrived if "delta" in json.loads(data)]
    assert len(deltas) == 12  # one token a message (the node's default)

    row = stored_browser_row(collector, ran["trace"], "transport, outcome, content_chunks, content_bytes, service")
    assert row == ("websocket", "completed", 12, sum(len(d.encode()) for d in deltas), "realtime-page")
    query = (
        "SELECT offset_us, wire_bytes FROM chunk_timeline WHERE trace_id = {t:String} AND side = 'browser' ORDER BY seq"
    )
    chunks = collector.query_client.query(query, parameters={"t": ran["trace"]}).result_rows
    assert [wire for _, wire in chunks] == [len(data.encode()) for _, data in arrived]
    read = [seen for seen, _ in arrived]  # µs, rounded as the snippet rounds: 1 µs either way
    timed = [offset for offset, _ in chunks]
    assert all(
        before - 1 <= offset <= seen + 1 for offset, seen, before in zip(timed, read, [0, *read[:-1]], strict=True)
    ), (chunks, arrived)
    left = stored_browser_row(collector, ran["left"], "outcome, content_chunks")
    assert left == ("cancelled", 2)  # three messages read, the first (response.created) without text


def _json_cases() -> list[list[list]]:
    """Documents, prefixes and near-JSON text, cut into pieces at random: [[time, piece], ...] per case."""
    rng = random.Random(36)
    alphabet = '{}[]:,"\\ \n0123456789-+.eEtruefalsnbu\t'

    def value(depth: int) -> object:
        kind = rng.randrange(7 if depth < 3 else 4)
        if kind == 0:
            return rng.choice([None, True, False])
        if kind == 1:
            return rng.choice([0, -7, 12345, 3.25, -0.5e-3, 1e21])
        if kind in (2, 3):
            return "".join(rng.choice('ab "\\\n\té€\u0001') for _ in range(rng.randrange(6)))
        if kind in (4, 5):
            return {"".join(rng.choice('ké"\\') for _ in range(rng.randrange(4))): value(depth + 1) for _ in range(3)}
        return [value(depth + 1) for _ in range(rng.randrange(4))]

    texts = ['{"a": 1,}', '{"a" 1}', "[1,]", "[1 2]", '{"a": tru"th}', '{"a": "tab\there"}', '{"a": "\\x"}']
    texts += ['{"a": 1} {"b": 2}', '{"a\\u00e9\\"b": null, "\\n": []}', "12", "tr", "-", "01", "1.", "[[]]]"]
    for _ in range(120):
        text = json.dumps(value(0), ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1]))
        texts += [text, text[: rng.randrange(len(text) + 1)]]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 30))) for _ in range(200)]
    cases = []
    for text in texts:
        cuts = sorted({0, len(text), *(rng.randrange(len(text) + 1) for _ in range(rng.randrange(8)))})
        cases.append([[i, text[a:b]] for i, (a, b) in enumerate(itertools.pairwise(cuts))])
    return cases


def test_the_snippets_json_tracker_agrees_with_the_sdks(chromium, chat_stack) -> None:
    """The browser's JsonProgress, run in Chromium, against the Python SDK's on the same pieces: the same fields,
    times and outcome on whole documents, prefixes and near-JSON text."""
    collector, chat = chat_stack
    open_chat_page(chromium, chat)
    cases = _json_cases()
    script = """
        const [url, cases, done] = arguments;
        import(url).then((sdk) => done(cases.map((pieces) => {
            const tracker = new sdk.JsonProgress();
            for (const [now, text] of pieces) tracker.feed(text, now);
            tracker.finish();
            return [tracker.fields, tracker.fieldCount, tracker.validAt, tracker.outcome];
        })));
    """
    in_browser = chromium.execute_async_script(script, f"{collector.http_url}/sdk/streamscope.js", cases)
    expected = []
    for pieces in cases:
        tracker = JsonProgress()
        for now, text in pieces:
            tracker.feed(text, now)
        tracker.finish()
        expected.append([[list(f) for f in tracker.fields], tracker.field_count, tracker.valid_ns, tracker.outcome])
    assert in_browser == expected
    assert {outcome for *_, outcome in expected} == {"valid", "truncated", "malformed"}


def test_a_json_answer_read_through_the_snippet_reaches_streams(chromium, chat_stack) -> None:
    """scope.fetch sees the request ask for a JSON answer and follows it: the browser row says when each field and
    the document were complete, at the arrivals of the chunks that completed them."""
    collector, chat = chat_stack
    open_chat_page(chromium, chat)
    script = """
        const [endpoint, done] = arguments;
        const scope = window.streamscope.init({ endpoint, service: "json-page" });
        const body = JSON.stringify({ model: "sim-llm", messages: [{ role: "user", content: "hi" }], max_tokens: 12,
            stream: true, response_format: { type: "json_object" } });
        (async () => {
          const response = await scope.fetch("engine/v1/chat/completions", { method: "POST", body });
          await response.text();
          await new Promise((resolve) => setTimeout(resolve, 200));
          await scope.flush();
          done(response.streamscope.traceId);
        })();
    """
    trace_id = chromium.execute_async_script(script, collector.http_url)
    columns = "json_document, json_outcome, json_fields, json_field_us, json_valid_us, json_field_count"
    document, outcome, fields, field_us, valid_us, count = stored_browser_row(collector, trace_id, columns)
    assert (document, outcome, fields, count) == ("content", "valid", ["answer", "detail", "tokens"], 3)
    offsets = collector.query_client.query(
        "SELECT groupArray(offset_us) FROM (SELECT offset_us FROM chunk_timeline "
        "WHERE trace_id = {t:String} AND side = 'browser' ORDER BY seq)",
        parameters={"t": trace_id},
    ).result_rows[0][0]
    assert set(field_us) <= set(offsets) and field_us == sorted(field_us)
    assert field_us[-1] == valid_us  # the closing brace completes the number and the document


def test_text_a_page_took_back_reaches_streams(chromium, chat_stack) -> None:
    """A page whose stream withdraws text (by hand here; scope.fetch reads a delta's "retract" the same way)."""
    collector, chat = chat_stack
    open_chat_page(chromium, chat)
    script = """
        const [endpoint, done] = arguments;
        const scope = window.streamscope.init({ endpoint, service: "drafts-page" });
        const stream = scope.stream({ model: "m" });
        const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
        (async () => {
          stream.chunk("Hello wor");
          await pause(40);
          stream.chunk("");  // a retraction: no text of its own
          stream.retract(3, 1);
          stream.chunk("world");
          stream.end("completed");
          await pause(300);
          await scope.flush();
          done(stream.traceId);
        })();
    """
    trace_id = chromium.execute_async_script(script, collector.http_url)
    columns = "retractions, retracted_bytes, retracted_tokens, retraction_shown_us"
    count, size, tokens, shown = stored_browser_row(collector, trace_id, columns)
    assert (count, size, tokens) == (1, 3, 1)
    assert shown[0] >= 40_000  # "wor" was on screen from the first chunk to the retraction, 40 ms later or more
    kinds = collector.query_client.query(
        "SELECT groupArray(kind) FROM (SELECT kind FROM chunks WHERE trace_id = {t:String} ORDER BY seq)",
        parameters={"t": trace_id},
    ).result_rows[0][0]
    assert kinds == ["first", "retract", "content"]


def test_the_snippet_reads_a_deltas_withdrawal_as_the_sdk_does(chromium, chat_stack) -> None:
    collector, chat = chat_stack
    open_chat_page(chromium, chat)
    deltas = [{"retract": {"bytes": 9, "tokens": 2}}, {"retract": {"bytes": 9}}, {"retract": {"bytes": 0}}, {}]
    script = """
        const [url, deltas, done] = arguments;
        import(url).then((sdk) => done(deltas.map((delta) => sdk.retractionOf({ choices: [{ delta }] }))));
    """
    read = chromium.execute_async_script(script, f"{collector.http_url}/sdk/streamscope.js", deltas)
    assert read == [{"bytes": 9, "tokens": 2}, {"bytes": 9, "tokens": 0}, None, None]


def test_the_snippet_reads_a_replayed_stream_from_another_origin(chromium, chat_stack) -> None:
    """`streamscope replay` aimed at by a page: the snippet's fetch crosses origins (its traceparent header makes
    the browser ask first) and records the recorded rhythm's chunks with their recorded sizes."""
    collector, chat = chat_stack
    recording = Recording(f"{9:032x}", f"{1:016x}", "client", "m", (30_000, 60_000, 400_000), (0, 7, 11))
    server = BackgroundServer(replay_app(recording)).start()
    try:
        open_chat_page(chromium, chat)
        script = """
            const [endpoint, url, done] = arguments;
            const scope = window.streamscope.init({ endpoint, service: "replay-page" });
            (async () => {
              const response = await scope.fetch(url, { method: "POST", body: "{}" });
              await response.text();
              await new Promise((resolve) => setTimeout(resolve, 200));
              await scope.flush();
              done(response.streamscope.traceId);
            })();
        """
        url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
        trace_id = chromium.execute_async_script(script, collector.http_url, url)
    finally:
        server.stop()
    content_chunks, content_bytes = stored_browser_row(collector, trace_id, "content_chunks, content_bytes")
    assert (content_chunks, content_bytes) == (2, 18)
