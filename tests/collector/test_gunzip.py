"""Inflating a gzipped body: bounded by the limit whatever its gzip trailer declares."""

from __future__ import annotations

import gzip
import os

import pytest

from streamscope.errors import DecodeError, LimitExceeded
from streamscope_collector.http.body import gunzip

LIMIT = 1024 * 1024


def with_declared_size(body: bytes, size: int) -> bytes:
    """``body`` (one gzip member) with the inflated size its trailer declares replaced by ``size``."""
    return body[:-4] + size.to_bytes(4, "little")


@pytest.mark.parametrize("size", [0, 1, 100_000, LIMIT])
def test_a_body_inflates_whole_up_to_the_limit(size):
    data = os.urandom(size // 2) + b"\x00" * (size - size // 2)
    assert gunzip(gzip.compress(data), LIMIT) == data


@pytest.mark.parametrize("declared", [10, LIMIT, 2**32 - 1])
def test_a_bomb_is_refused_at_the_limit_whatever_its_trailer_declares(declared):
    bomb = with_declared_size(gzip.compress(b"\x00" * (8 * LIMIT)), declared)
    with pytest.raises(LimitExceeded, match="after decompression"):
        gunzip(bomb, LIMIT)


@pytest.mark.parametrize("declared", [10, 100_001])
def test_a_trailer_that_misstates_the_size_is_refused_as_corrupt(declared):
    body = with_declared_size(gzip.compress(os.urandom(100_000)), declared)
    with pytest.raises(DecodeError, match="does not inflate"):
        gunzip(body, LIMIT)


def test_a_second_gzip_member_is_refused_as_trailing_data():
    with pytest.raises(DecodeError, match="trailing data"):
        gunzip(gzip.compress(os.urandom(50_000)) + gzip.compress(b"x"), LIMIT)
