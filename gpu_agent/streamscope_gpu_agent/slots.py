"""llama.cpp's ``/slots``: how full the fullest busy slot's context is, the nearest llama.cpp comes to a KV gauge.

Each slot (``-np``) owns a context of ``n_ctx`` tokens. ``/slots`` (served unless ``--no-slots``) lists every slot
with ``n_ctx`` and ``is_processing``, and, once it has served a task, ``n_prompt_tokens``: despite the name, every
token its sequence holds, the prompt and what was generated so far (``server_slot::to_json`` over
``slot.prompt.tokens`` in tools/server/server-context.cpp). An idle slot keeps its last tokens for reuse as a cache:
they hold no stream up, so only busy slots count.
"""

from __future__ import annotations

import json

import httpx

__all__ = ["context_usage", "slots_url"]


def slots_url(metrics_url: str) -> str:
    """The ``/slots`` beside a ``/metrics`` URL: the last path segment replaced, whatever prefix a proxy put before."""
    url = httpx.URL(metrics_url)
    return str(url.copy_with(path=url.path.rsplit("/", 1)[0] + "/slots", query=None))


def context_usage(text: str) -> float:
    """The largest share of its context a busy slot holds, 0 when none is busy; raises ValueError on anything that is
    not llama.cpp's list of slots."""
    slots = json.loads(text)
    if not isinstance(slots, list) or not slots or not all(isinstance(slot, dict) for slot in slots):
        raise ValueError("not a list of llama.cpp slots")
    usage = 0.0
    for slot in slots:
        if slot.get("is_processing") is True:
            held, size = slot.get("n_prompt_tokens"), slot.get("n_ctx")
            if not isinstance(held, int) or not isinstance(size, int) or size <= 0:
                raise ValueError(f"busy slot {slot.get('id')} without n_prompt_tokens and a positive n_ctx")
            usage = max(usage, held / size)
    return usage
