"""Backend macro expansion against the plugin's own test vectors (pkg/macros/macros_test.go)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streamscope_dashboards.macros import MacroError, QueryContext, apply_variables, expand

CTX = QueryContext(
    start=datetime(2014, 11, 12, 11, 45, 26, 371000, tzinfo=UTC),
    end=datetime(2015, 11, 12, 11, 45, 26, 371000, tzinfo=UTC),
    interval=timedelta(seconds=20),
)


@pytest.mark.parametrize(
    ("sql", "expanded"),
    [
        ("$__timeFilter(ts)", "ts >= toDateTime(1415792726) AND ts <= toDateTime(1447328726)"),
        (
            "$__timeFilter_ms(ts)",
            "ts >= fromUnixTimestamp64Milli(1415792726371) AND ts <= fromUnixTimestamp64Milli(1447328726371)",
        ),
        ("$__dateFilter(dateCol)", "dateCol >= toDate('2014-11-12') AND dateCol <= toDate('2015-11-12')"),
        (
            "$__dt(d, t)",
            "(d >= toDate('2014-11-12') AND d <= toDate('2015-11-12')) AND "
            "(t >= toDateTime(1415792726) AND t <= toDateTime(1447328726))",
        ),
        ("$__fromTime, $__toTime", "toDateTime(1415792726), toDateTime(1447328726)"),
        ("$__fromTime_ms", "fromUnixTimestamp64Milli(1415792726371)"),
        ("$__timeInterval(ts)", "toStartOfInterval(toDateTime(ts), INTERVAL 20 second)"),
        ("$__timeInterval_ms(ts)", "toStartOfInterval(toDateTime64(ts, 3), INTERVAL 20000 millisecond)"),
        ("$__interval_s", "20"),
        ("$__interval", "20s"),
        ("$__timeGroup(ts, '5m')", "toStartOfInterval(toDateTime(ts), INTERVAL 300 second)"),
        ("$__timeFrom(ts) AND $__timeTo(ts)", "ts >= toDateTime(1415792726) AND ts <= toDateTime(1447328726)"),
        # nested parentheses and a comma inside a string stay inside one argument
        ("$__timeInterval(coalesce(a, b))", "toStartOfInterval(toDateTime(coalesce(a, b)), INTERVAL 20 second)"),
        # longest name first; a longer identifier is not a macro; unknown macros and variables are left alone
        ("$__interval_sx $__conditionalAll(x, $v) ${service}", "$__interval_sx $__conditionalAll(x, $v) ${service}"),
        # comments are blanked (their macros do not expand); a comment marker inside a string is text
        ("SELECT 1 /* $__fromTime */ -- $__toTime", "SELECT 1" + " " * 31),
        ("SELECT '--', $__interval_s", "SELECT '--', 20"),
    ],
)
def test_expansions_match_the_plugin(sql, expanded):
    assert expand(sql, CTX) == expanded


def test_wrong_argument_count_is_an_error():
    with pytest.raises(MacroError, match=r"\$__timeFilter takes 1"):
        expand("$__timeFilter(a, b)", CTX)
    with pytest.raises(MacroError, match="period"):
        expand("$__timeGroup(ts, 'soon')", CTX)


@pytest.mark.parametrize(
    ("interval", "text"),
    [(timedelta(milliseconds=500), "500ms"), (timedelta(seconds=90), "1m"), (timedelta(days=400), "1y")],
)
def test_interval_notation(interval, text):
    assert expand("$__interval", QueryContext(CTX.start, CTX.end, interval)) == text


def test_variables_as_the_frontend_applies_them():
    sql = "WHERE $__conditionalAll(model IN (${model:singlequote}), $model) AND $__conditionalAll(x IN ($svc), $svc)"
    assert apply_variables(sql, {}) == "WHERE 1=1 AND 1=1"  # All
    assert apply_variables(sql, {"model": ["$__all"], "svc": []}) == "WHERE 1=1 AND 1=1"
    assert apply_variables(sql, {"model": ["a", "o'b"], "svc": ["s"]}) == "WHERE model IN ('a','o\\'b') AND x IN (s)"
    with pytest.raises(MacroError, match="conditionalAll"):
        apply_variables("$__conditionalAll(x)", {})
