"""What the agent measures, normalized across engines and GPUs: one Sample per (metric, engine, GPU) and time.

Engine scrapers map vLLM, SGLang, TGI and llama.cpp names onto the ``ENGINE_*`` metrics below; the NVML sampler fills
the ``GPU_*`` ones. Counters are reported as the increase over the sampling interval (reset-aware), never
as raw cumulative values, so a restart cannot produce a negative or a huge spike. Histograms are reported
as the per-interval count and sum of their observations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from streamscope import semconv as sc

# Engine gauges (value at sample time)
ENGINE_KV_USAGE: Final = "kv_usage"
"""KV-cache usage, 0..1 (vLLM kv_cache_usage_perc / gpu_cache_usage_perc, SGLang token_usage)."""
ENGINE_CONTEXT_USAGE: Final = "context_usage"
"""The fullest busy slot's context, 0..1: the tokens its sequence holds (prompt and generated so far) over the slot's
context size (llama.cpp ``/slots``). Not a KV-cache fraction: each slot owns its context, and one that fills ends or
shifts its own stream, never preempts another; 0 while no slot is busy."""
ENGINE_REQUESTS_RUNNING: Final = "requests_running"
ENGINE_REQUESTS_WAITING: Final = "requests_waiting"
"""Requests admitted and not yet running (llama.cpp: deferred until a slot is free)."""
ENGINE_SPEC_ACCEPTANCE: Final = "spec_acceptance"
"""Draft acceptance over the interval, 0..1 (vLLM and llama.cpp accepted/draft tokens; SGLang spec_accept_rate)."""
ENGINE_SPEC_ACCEPT_LENGTH: Final = "spec_accept_length"
"""Tokens a sequence gains per speculative step, the bonus token included (vLLM and llama.cpp 1 + accepted tokens /
drafts; SGLang spec_accept_length). A draft collapse leaves one token per step, so it slows a stream by at most this."""

# Engine counters (increase over the interval)
ENGINE_PREEMPTIONS: Final = "preemptions"
ENGINE_PROMPT_TOKENS: Final = "prompt_tokens"
"""Prompt tokens of the requests admitted, those the prefix cache held included."""
ENGINE_PROMPT_TOKENS_COMPUTED: Final = "prompt_tokens_computed"
"""Of those, the tokens the engine computed (vLLM ``prompt_tokens_by_source{source="local_compute"}``; llama.cpp
``prompt_tokens``, which leaves the cached out; SGLang and vLLM without it: prompt tokens less cached ones): what a
prefill costs the batch it joins. Absent where the engine does not say (TGI)."""
ENGINE_PROMPT_TOKENS_CACHED: Final = "prompt_tokens_cached"
"""Prompt tokens served from a cache, counted once per request (vLLM and llama.cpp ``prompt_tokens_cached``, SGLang
``cached_tokens``); unlike vLLM's prefix-cache hits, which count every scheduling attempt."""
ENGINE_GENERATION_TOKENS: Final = "generation_tokens"
ENGINE_PREFIX_QUERIES: Final = "prefix_cache_queries"
ENGINE_PREFIX_HITS: Final = "prefix_cache_hits"
ENGINE_SPEC_DRAFT_TOKENS: Final = "spec_draft_tokens"
ENGINE_SPEC_ACCEPTED_TOKENS: Final = "spec_accepted_tokens"
ENGINE_REQUESTS_FINISHED: Final = "requests_finished"
ENGINE_REQUESTS_ABORTED: Final = "requests_aborted"
"""Requests given up by their client (vLLM finished_reason abort, SGLang aborted, TGI err dropped)."""
ENGINE_REQUESTS_FAILED: Final = "requests_failed"
"""Requests the engine failed while generating (TGI err generation or incomplete)."""
ENGINE_REQUESTS_REJECTED: Final = "requests_rejected"
"""Requests turned away because the engine was full (TGI err overloaded). Invalid requests are the client's
error, not the engine's state, and are not counted."""
ENGINE_REQUESTS_WAITING_FOR_KV: Final = "requests_waiting_for_kv"
"""Waiting requests the scheduler had no capacity for (vLLM ``num_requests_waiting_by_reason{reason="capacity"}``:
KV-cache blocks or batch slots), as opposed to those deferred for other reasons (a remote KV transfer, a grammar
being compiled): the queue KV pressure makes, among others."""

# Engine histograms (per-interval count and sum)
ENGINE_STEPS: Final = "steps"
"""Engine steps in the interval (vLLM iteration_tokens_total count, llama.cpp ``n_decode``: its llama_decode calls)."""
ENGINE_STEP_TOKENS: Final = "step_tokens"
"""Tokens scheduled across those steps (its sum); step_tokens / steps is the mean batch size in tokens."""
ENGINE_STEP_TOKENS_MAX: Final = "step_tokens_max"
"""Upper bound of the largest step in the interval: the highest histogram bucket that gained an observation. A step
beyond the last finite bucket reports that bucket's bound, a lower bound (see ``ENGINE_STEPS_BEYOND_BUCKETS``)."""
ENGINE_STEPS_BEYOND_BUCKETS: Final = "steps_beyond_buckets"
"""Steps in the interval larger than the histogram's last finite bucket (vLLM: 16,384 tokens); their size is known
only to be at least that."""
ENGINE_ITL_COUNT: Final = "itl_count"
ENGINE_ITL_SUM: Final = "itl_sum_s"
ENGINE_TTFT_COUNT: Final = "ttft_count"
ENGINE_TTFT_SUM: Final = "ttft_sum_s"

# GPU (NVML, or dcgm-exporter)
GPU_MEMORY_USED: Final = "memory_used_bytes"
GPU_MEMORY_TOTAL: Final = "memory_total_bytes"
GPU_UTILIZATION: Final = "utilization"
"""Share of time a kernel was running, 0..1."""
GPU_MEMORY_UTILIZATION: Final = "memory_utilization"
GPU_SM_CLOCK: Final = "sm_clock_mhz"
GPU_MEMORY_CLOCK: Final = "memory_clock_mhz"
GPU_POWER: Final = "power_watts"
GPU_TEMPERATURE: Final = "temperature_c"
GPU_CLOCK_EVENT_REASONS: Final = "clock_event_reasons"
"""NVML clock-event (throttle) reasons bitmask, the slowdowns only (``SLOWDOWN_REASONS``)."""
GPU_PCIE_TX: Final = "pcie_tx_bytes_per_s"
GPU_PCIE_RX: Final = "pcie_rx_bytes_per_s"
GPU_LOST: Final = "lost"
"""1 while NVML says the GPU is lost (fallen off the bus: nothing else can be read from it), 0 once it answers again."""
GPU_PCIE_REPLAYS: Final = "pcie_replays"
"""PCIe packets sent again in the interval (a link that corrupts transfers)."""
GPU_ROW_REMAP_FAILURE: Final = "row_remap_failure"
"""1 when the GPU failed to remap a row of faulty memory: it needs to be reset or replaced."""
GPU_GRAPHICS_ENGINE_ACTIVE: Final = "graphics_engine_active"
GPU_SM_ACTIVE: Final = "sm_active"
GPU_SM_OCCUPANCY: Final = "sm_occupancy"
GPU_TENSOR_ACTIVE: Final = "tensor_active"
GPU_DRAM_ACTIVE: Final = "dram_active"
"""DCGM's profiling ratios, 0..1: share of time the engine, SMs, tensor pipes or memory interface were busy. Decode
is memory-bound, so DRAM activity says more about it than utilisation, which only says a kernel was running."""

SLOWDOWN_REASONS: Final = 0x4 | 0x8 | 0x20 | 0x40 | 0x80 | 0x200 | 0x400
"""Clock-event reasons that slow the GPU down: software power cap, hardware slowdown, software and hardware thermal
slowdown, power brake, board limit, reliability (NVML's bits, which DCGM reports as they are). Idle, application or
display clock settings and sync boost lower clocks on purpose, not because the GPU is held back."""

# The agent about itself
AGENT_SCRAPE_DURATION: Final = "scrape_duration_s"
AGENT_SCRAPE_ERRORS: Final = "scrape_errors"
AGENT_ENGINE_UP: Final = "engine_up"
"""1 when the last engine scrape succeeded, 0 when it failed."""

SOURCES: Final = sc.METRIC_SOURCES


@dataclass(frozen=True, slots=True)
class Sample:
    time_ns: int
    source: str
    """engine, gpu or agent."""
    metric: str
    value: float
    engine: str = ""
    """The engine's own name for itself: ``vllm``, ``sglang``, ``tgi``, ``llamacpp``, plus its index when one endpoint
    serves several (``vllm/1``); empty for GPU samples."""
    gpu_uuid: str = ""
    gpu_index: int = -1
    gpu_name: str = ""


@dataclass(frozen=True, slots=True)
class XidEvent:
    """A GPU error the driver reported: an XID critical error (e.g. 79: the GPU fell off the bus), or, where the
    driver posts them, the GPU becoming unavailable or needing a recovery action (``kind``)."""

    time_ns: int
    """When the agent learnt of it (NVML's event data carries no timestamp; DCGM's field holds the last XID)."""
    gpu_uuid: str
    """Empty, with gpu_index -1, when the GPU that raised it no longer answers."""
    gpu_index: int
    xid: int
    """The XID, or the event's data for the other kinds (the recovery action NVML asks for)."""
    kind: str = "xid"
    """``xid``, ``gpu_unavailable`` or ``gpu_recovery_action``."""
