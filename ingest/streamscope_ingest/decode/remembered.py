"""A bounded memory of what a reader made of each encoding it was given: the decoders of OTLP pieces that repeat
from span to span (chunk event tails, span attributes) read each distinct one once and look the others up."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _always(_: object) -> bool:
    return True


class Remembered(dict[K, V]):
    """``memory[key]`` is ``read(key)``, kept unless ``kept`` refuses the value; past ``capacity`` entries the memory
    starts over. A hit is a plain dictionary subscript; only a miss runs Python. Safe across threads: a key read
    twice stores the same answer twice."""

    def __init__(self, read: Callable[[K], V], capacity: int, kept: Callable[[V], bool] = _always) -> None:
        super().__init__()
        self.capacity = capacity
        self._read, self._kept = read, kept

    def __missing__(self, key: K) -> V:
        value = self._read(key)
        if self._kept(value):
            if len(self) >= self.capacity:
                self.clear()
            self[key] = value
        return value
