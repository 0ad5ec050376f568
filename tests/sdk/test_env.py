from __future__ import annotations

import pytest

from streamscope import env
from streamscope.errors import ConfigError


@pytest.mark.parametrize("value", ["abc", "0", "-5", "5000000"])
def test_bad_stall_thresholds_are_config_errors(monkeypatch, value):
    monkeypatch.setenv(env.STREAMSCOPE_STALL_THRESHOLD_MS, value)
    with pytest.raises(ConfigError, match=env.STREAMSCOPE_STALL_THRESHOLD_MS):
        env.stall_threshold_us()


def test_stall_threshold_default_and_override(monkeypatch):
    monkeypatch.delenv(env.STREAMSCOPE_STALL_THRESHOLD_MS, raising=False)
    assert env.stall_threshold_us() == 400_000
    monkeypatch.setenv(env.STREAMSCOPE_STALL_THRESHOLD_MS, "250.5")
    assert env.stall_threshold_us() == 250_500
