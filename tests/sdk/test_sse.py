from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamscope.sse import SSEDecoder

EVENTS_ON_THE_WIRE = [
    b'data: {"a":1}\n\n',
    b": keep-alive\n\n",
    b"event: delta\r\ndata: line one\r\ndata:line two\r\nid: 7\r\n\r\n",
    b"\n" + "data: café\rdata: x\r\r".encode(),  # a stray blank line counts toward the next event
    b"retry: 100\ndata: [DONE]\n\n",
]
BODY = b"".join(EVENTS_ON_THE_WIRE)
EXPECTED = [
    ("message", '{"a":1}', None),
    ("", "", None),
    ("delta", "line one\nline two", "7"),
    ("message", "café\nx", "7"),
    ("message", "[DONE]", "7"),
]
EXPECTED = [(*fields, len(raw)) for fields, raw in zip(EXPECTED, EVENTS_ON_THE_WIRE, strict=True)]


def decode(parts: list[bytes]):
    decoder = SSEDecoder()
    events = [e for part in parts for e in decoder.feed(part)]
    events += list(decoder.flush())
    return [(e.event, e.data, e.id, e.wire_bytes) for e in events]


@given(st.lists(st.integers(0, len(BODY)), max_size=12))
def test_any_split_of_the_body_gives_the_same_events(cuts):
    points = sorted(set(cuts))
    parts = [BODY[a:b] for a, b in zip([0, *points], [*points, len(BODY)])]
    assert decode(parts) == EXPECTED


def test_a_last_event_without_its_blank_line_is_delivered_at_the_end():
    assert decode([b"data: tail"]) == [("message", "tail", None, 10)]
