"""Every error of the tree gets one answer on both transports; a class added to the tree is never left unanswered."""

from __future__ import annotations

import logging

import grpc
import pytest

from streamscope import errors
from streamscope_collector import status
from streamscope_collector.auth import Forbidden, Unauthorized
from streamscope_collector.status import RETRY_AFTER_S, UnsupportedMediaType, answer

Code = grpc.StatusCode
RETRY = {"Retry-After": RETRY_AFTER_S}
INTERNAL = (500, Code.INTERNAL, 13, status.INTERNAL_MESSAGE, {})

EXPECTED: dict[type[Exception], tuple[int, grpc.StatusCode, int, str, dict[str, str]]] = {
    # class: (HTTP status, gRPC code, google.rpc.Code of the HTTP body, message for "boom", headers)
    errors.StreamscopeError: INTERNAL,
    errors.ConfigError: INTERNAL,
    errors.SchemaMismatch: INTERNAL,
    errors.GrafanaError: INTERNAL,
    errors.MissingDependency: INTERNAL,
    errors.DecodeError: (400, Code.INVALID_ARGUMENT, 3, "boom", {}),
    errors.LimitExceeded: (413, Code.RESOURCE_EXHAUSTED, 8, "boom", {}),
    UnsupportedMediaType: (415, Code.INVALID_ARGUMENT, 3, "boom", {}),
    Unauthorized: (401, Code.UNAUTHENTICATED, 16, "boom", {"WWW-Authenticate": "Bearer"}),
    Forbidden: (403, Code.PERMISSION_DENIED, 7, "boom", {}),
    errors.WriteError: (500, Code.INTERNAL, 13, "boom", {}),
    errors.RetryableWriteError: (503, Code.UNAVAILABLE, 14, "boom; retry later", RETRY),
    errors.SpoolFull: (503, Code.UNAVAILABLE, 14, "boom; retry later", RETRY),
    errors.SpoolUnavailable: (503, Code.UNAVAILABLE, 14, "boom; retry later", RETRY),
    errors.Overloaded: (429, Code.UNAVAILABLE, 8, "boom; retry later", RETRY),
}


def subclasses(root: type[Exception]) -> list[type[Exception]]:
    """``root`` and every class below it that is loaded, however deep."""
    found = [root]
    for child in root.__subclasses__():
        found += subclasses(child)
    return found


def answered(exc: Exception) -> tuple[int, grpc.StatusCode, int, str, dict[str, str]]:
    """The answer to ``exc`` as one comparable tuple, in the order of ``EXPECTED``."""
    got = answer(exc, "a test request")
    return got.http, got.grpc, got.rpc_code, got.message, got.headers


@pytest.mark.parametrize("error_type", list(EXPECTED), ids=lambda error_type: error_type.__name__)
def test_each_error_gets_its_status_on_both_transports(error_type: type[Exception]) -> None:
    assert answered(error_type("boom")) == EXPECTED[error_type]


def test_an_error_outside_the_tree_is_internal_and_logged_without_its_text(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger=status.__name__):
        assert answered(KeyError("secret detail")) == INTERNAL
    assert "unexpected error handling a test request" in caplog.text


def test_every_class_of_the_error_tree_has_a_rule_of_its_own() -> None:
    tree = [cls for cls in subclasses(errors.StreamscopeError) if cls.__module__ == errors.__name__]
    # the walk goes deep: grandchildren and their children are found
    assert set(tree) >= {errors.SpoolFull, errors.Overloaded, errors.LimitExceeded, errors.GrafanaError}
    unruled = [cls.__name__ for cls in tree if cls not in status.RULES]
    assert not unruled, f"give these a rule in streamscope_collector.status: {unruled}"
    assert set(tree) | {Unauthorized, Forbidden, UnsupportedMediaType} == set(status.RULES) == set(EXPECTED)


@pytest.mark.parametrize("parent", list(EXPECTED), ids=lambda parent: parent.__name__)
def test_a_new_subclass_without_a_rule_answers_as_its_parent(parent: type[Exception]) -> None:
    child = type(f"New{parent.__name__}", (parent,), {})
    assert child not in status.RULES
    assert answered(child("boom")) == answered(parent("boom"))


def test_the_nearest_rule_wins_over_a_parents() -> None:
    assert status.rule_for(errors.Overloaded).http == 429 and status.rule_for(errors.SpoolFull).http == 503
    assert status.rule_for(errors.LimitExceeded).http == 413 and status.rule_for(UnsupportedMediaType).http == 415
