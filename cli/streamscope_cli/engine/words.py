"""The words a simulated answer is made of: one token each."""

from __future__ import annotations

import random

WORDS = (
    "tokens arrive in a rhythm the reader feels before any dashboard shows it and a pause mid answer reads as a "
    "freeze while the fleet average stays green because averages forget the shape of each stream"
).split()


def words(rng: random.Random, tokens: int, sent: int) -> str:
    """``tokens`` words, as the text of the chunk after ``sent`` tokens: a space before each but the answer's
    first."""
    return "".join((" " if sent + i else "") + rng.choice(WORDS) for i in range(tokens))
