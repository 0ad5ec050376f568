"""JsonProgress: field completion times worked by hand, and agreement with ``json.loads`` on every document,
every split of it into pieces, every prefix and arbitrary text."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope._internal.json_progress import MAX_FIELDS, JsonProgress


def follow(pieces: list[tuple[int, str]]) -> JsonProgress:
    tracker = JsonProgress()
    for now, text in pieces:
        tracker.feed(text, now)
    tracker.finish()
    return tracker


def test_each_field_is_complete_when_its_value_is():
    tracker = follow(
        [(10, '{"name": "Ad'), (20, 'a", "age": 4'), (30, '2, "tags": ["x"'), (40, '], "ok": tru'), (50, "e}")]
    )
    # "Ada" closes at 20; 42 could have gone on until the comma at 30; the array closes at 40; true at the brace
    assert tracker.fields == [("name", 20), ("age", 30), ("tags", 40), ("ok", 50)]
    assert (tracker.valid_ns, tracker.outcome, tracker.field_count, tracker.started_ns) == (50, "valid", 4, 10)


def test_a_top_level_array_counts_its_elements_and_nesting_does_not_count():
    tracker = follow([(1, ' [{"a": {"b": [1, 2]}}'), (2, ', "tw'), (3, 'o", 3'), (4, "]\n")])
    assert tracker.fields == [("[0]", 1), ("[1]", 3), ("[2]", 4)]
    assert (tracker.valid_ns, tracker.outcome) == (4, "valid")


def test_escapes_split_across_pieces_make_the_key():
    tracker = follow([(1, '{"a\\'), (2, 'u00e9\\"'), (3, 'b": null, "\\n":'), (4, "[]}")])
    assert tracker.fields == [('aé"b', 3), ("\n", 4)]


@pytest.mark.parametrize(
    ("pieces", "outcome", "fields"),
    [
        (['{"a": 1, "b": "unfinish'], "truncated", ["a"]),
        (['{"a": 1, "b": 2'], "truncated", ["a"]),  # 2 may go on
        (['{"a" 1}'], "malformed", []),
        (['{"a": 1,}'], "malformed", ["a"]),
        (['{"a": tru', "th}"], "malformed", []),
        (['{"a": "tab\there"}'], "malformed", []),
        (['{"a": "\\x"}'], "malformed", []),
        (["   "], "truncated", []),
    ],
)
def test_truncated_and_malformed_documents(pieces, outcome, fields):
    tracker = follow(list(enumerate(pieces)))
    assert (tracker.outcome, [name for name, _ in tracker.fields], tracker.valid_ns) == (outcome, fields, None)


def test_anything_after_the_document_makes_it_malformed_though_it_was_valid_once():
    tracker = follow([(1, '{"a": 1}  '), (2, ' {"b": 2}')])
    assert (tracker.outcome, tracker.valid_ns, tracker.fields) == ("malformed", 1, [("a", 1)])


def test_only_the_first_fields_are_named_and_all_are_counted():
    document = json.dumps({f"k{i}": i for i in range(MAX_FIELDS + 8)})
    tracker = follow([(i, c) for i, c in enumerate(document)])
    assert tracker.field_count == MAX_FIELDS + 8
    assert [name for name, _ in tracker.fields] == [f"k{i}" for i in range(MAX_FIELDS)]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


def cut(text: str, cuts: list[int]) -> list[tuple[int, str]]:
    points = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    return [(i, text[a:b]) for i, (a, b) in enumerate(itertools.pairwise(points))]


@settings(max_examples=300, deadline=None)
@given(json_values, st.sampled_from([None, 0, 2]), st.lists(st.integers(min_value=0), max_size=12))
def test_any_document_in_any_pieces_is_valid_with_its_top_level_fields(value, indent, cuts):
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    pieces = cut(text, cuts)
    tracker = follow(pieces)
    assert tracker.outcome == "valid"
    last = max(i for i, piece in pieces if piece.strip())
    scalar_at_end = not isinstance(value, dict | list | str)  # only the end of the stream completes it
    assert tracker.valid_ns == last or scalar_at_end
    names = (
        list(value)
        if isinstance(value, dict)
        else [f"[{i}]" for i in range(len(value))]
        if isinstance(value, list)
        else []
    )
    assert [name for name, _ in tracker.fields] == names[:MAX_FIELDS]
    assert all(a[1] <= b[1] for a, b in zip(tracker.fields, tracker.fields[1:]))


def strict_loads(text: str) -> bool:
    def refuse(constant: str) -> None:
        raise ValueError(constant)

    try:
        json.loads(text, parse_constant=refuse)
    except ValueError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(json_values, st.integers(min_value=0), st.lists(st.integers(min_value=0), max_size=6))
def test_a_prefix_is_valid_exactly_when_json_loads_takes_it(value, length, cuts):
    text = json.dumps(value)
    prefix = text[: length % (len(text) + 1)]
    if prefix.strip():
        assert (follow(cut(prefix, cuts)).outcome == "valid") == strict_loads(prefix)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='{}[]:,"\\ \n0123456789-+.eEtruefalsnbu\t', max_size=40), st.lists(st.integers(0), max_size=6))
def test_any_text_is_valid_exactly_when_json_loads_takes_it(text, cuts):
    if text.strip():
        assert (follow(cut(text, cuts)).outcome == "valid") == strict_loads(text)
