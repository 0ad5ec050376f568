"""Continuous-batching scheduler of the simulated engine: pure logic, one call per engine step.

Modelled on vLLM's V1 scheduler, reduced to what shapes token timing:
- a step serves running sequences first, then admits waiting ones, within a token budget per step;
- a step lasts a fixed cost, plus a decode cost per decoding sequence, plus a prefill cost per prompt token
  computed in it (so a big prompt joining the batch slows every stream in it: prefill interference);
- KV cache is a budget of blocks that sequences grow into; when a running sequence needs a block and none is
  free, the most recently arrived running sequence is preempted (recompute: its KV is dropped and it
  re-prefills prompt + generated tokens when it is admitted again);
- prefix caching: a prompt's shared prefix, once computed by a finished request, is not computed again
  (cached prefixes are kept in a small LRU and, as a simplification, do not hold blocks);
- speculative decoding: a decoding sequence proposes k draft tokens; each is accepted with a probability
  (left to right, stopping at the first rejection) and one bonus token follows; a request whose acceptance
  has collapsed gets about one token per step instead of several. Such a step records how much of it the
  collapse added: at normal acceptance what it emitted takes (emitted / expected) of a decoding step, so the
  rest is an extra step's worth of decoding (``StepResult.collapse_added``). Only the step's decoding counts:
  a prefill sharing the step would have slowed it at any acceptance.

Nothing here sleeps or knows the wall clock; the runtime (runtime.py) turns steps into real time.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict, deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SpecDecodeConfig:
    draft_tokens: int = 3
    acceptance: float = 0.8
    """Probability that each draft token is accepted, normally."""
    collapsed_acceptance: float = 0.05
    """The same while a request's acceptance has collapsed."""


@dataclass(frozen=True)
class SchedulerConfig:
    block_size: int = 16
    num_blocks: int = 8192
    max_running: int = 64
    max_step_tokens: int = 8192
    """Token budget of one step: prefill tokens plus decode tokens."""
    chunked_prefill: bool = True
    """Split long prompts across steps to fit the budget; without it a prompt is prefilled in one step."""
    step_base_ms: float = 6.0
    decode_ms_per_seq: float = 0.25
    prefill_ms_per_token: float = 0.02
    prefix_caching: bool = True
    prefix_cache_entries: int = 64
    spec_decode: SpecDecodeConfig | None = None

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.num_blocks < 1 or self.max_running < 1 or self.max_step_tokens < 1:
            raise ValueError("block_size, num_blocks, max_running and max_step_tokens must be positive")


@dataclass
class Sequence:
    request_id: str
    prompt_tokens: int
    max_tokens: int
    prefix_key: str | None = None
    prefix_tokens: int = 0
    spec_collapse: tuple[int, int] | None = None
    """Generated-token range [start, end) over which draft acceptance collapses."""
    status: str = "waiting"  # waiting | running | finished | aborted
    computed: int = 0
    """Tokens whose KV is in cache: prompt and generated tokens, re-prefilled after a preemption. A sampled
    token counts as computed when it is sampled (a simplification that does not change step timing)."""
    generated: int = 0
    blocks: int = 0
    preemptions: int = 0
    cached_tokens: int = 0

    @property
    def context(self) -> int:
        """Tokens that must be in the KV cache before the next token can be decoded."""
        return self.prompt_tokens + self.generated

    @property
    def prefilling(self) -> bool:
        return self.computed < self.context

    def collapsed(self) -> bool:
        span = self.spec_collapse
        return span is not None and span[0] <= self.generated < span[1]


@dataclass
class StepResult:
    duration_s: float
    prefill_s: float
    """The part of the duration spent on prefill tokens."""
    emitted: dict[str, int] = field(default_factory=dict)
    """Tokens each request produced in this step."""
    decoded: list[str] = field(default_factory=list)
    """Requests that decoded (as opposed to prefilled) in this step."""
    collapsed: list[str] = field(default_factory=list)
    """Requests that decoded with collapsed draft acceptance."""
    collapse_added: dict[str, float] = field(default_factory=dict)
    """Per collapsed request, the fraction of this step's decoding time (its duration less the prefill part)
    that its collapse added: 1 - tokens emitted / tokens expected at normal acceptance (0 when it emitted as
    many), the extra steps normal acceptance would not have needed for those tokens."""
    finished: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    admitted: list[str] = field(default_factory=list)
    """Requests admitted for the first time in this step."""
    left_waiting: list[str] = field(default_factory=list)
    """Requests never admitted yet that this step left waiting (no free slot, KV blocks or budget): queued."""
    prefill_tokens: int = 0
    decode_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted: int = 0
    spec_accepted_per_position: list[int] = field(default_factory=list)
    new_prompt_tokens: int = 0
    """Prompt tokens of requests admitted for the first time (counted once, not again after preemption)."""
    new_cached_tokens: int = 0
    """Of those, the tokens the prefix cache held: not computed."""

    @property
    def scheduled_tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens


class Scheduler:
    def __init__(self, config: SchedulerConfig, rng: random.Random | None = None) -> None:
        self.config = config
        self.rng = rng or random.Random(0)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.sequences: dict[str, Sequence] = {}
        self.free_blocks = config.num_blocks
        self._prefix_cache: OrderedDict[str, int] = OrderedDict()

    # --- requests ---------------------------------------------------------------------------------------

    def add(self, sequence: Sequence) -> None:
        if sequence.request_id in self.sequences:
            raise ValueError(f"duplicate request id {sequence.request_id}")
        if self._blocks_for(sequence.prompt_tokens + sequence.max_tokens) > self.config.num_blocks:
            raise ValueError(
                f"request {sequence.request_id} needs more KV blocks than the engine has "
                f"({sequence.prompt_tokens} prompt + {sequence.max_tokens} output tokens)"
            )
        self.sequences[sequence.request_id] = sequence
        self.waiting.append(sequence)

    def abort(self, request_id: str) -> None:
        sequence = self.sequences.pop(request_id, None)
        if sequence is None or sequence.status in ("finished", "aborted"):
            return
        if sequence in self.running:
            self.running.remove(sequence)
        elif sequence in self.waiting:
            self.waiting.remove(sequence)
        self._free(sequence)
        sequence.status = "aborted"

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def kv_usage(self) -> float:
        return 1.0 - self.free_blocks / self.config.num_blocks

    @property
    def used_blocks(self) -> int:
        return self.config.num_blocks - self.free_blocks

    # --- one engine step --------------------------------------------------------------------------------

    def step(self) -> StepResult:
        config = self.config
        budget = config.max_step_tokens
        work: list[tuple[Sequence, int]] = []  # (sequence, tokens computed in this step)
        result = StepResult(duration_s=0.0, prefill_s=0.0)

        for sequence in list(self.running):
            if sequence.status != "running":
                continue  # preempted earlier in this step
            if sequence.prefilling:
                tokens = sequence.context - sequence.computed
                if config.chunked_prefill:
                    tokens = min(tokens, budget)
            else:
                tokens = 1 + (config.spec_decode.draft_tokens if config.spec_decode else 0)
            if tokens <= 0 or tokens > budget:
                continue
            if not self._reserve(sequence, self._kv_after(sequence, tokens), result):
                continue  # it was preempted itself
            budget -= tokens
            work.append((sequence, tokens))

        while self.waiting and not result.preempted and len(self.running) < config.max_running and budget > 0:
            sequence = self.waiting[0]
            first_admission = sequence.computed == 0 and sequence.preemptions == 0
            hit = self._prefix_hit(sequence, result) if first_admission else 0
            remaining = sequence.context - hit
            tokens = min(remaining, budget) if config.chunked_prefill else remaining
            if tokens > budget and work:
                break  # an unchunked prompt waits for a step of its own
            needed = self._blocks_for(self._kv_after(sequence, tokens, computed=hit)) - sequence.blocks
            if needed > self.free_blocks:
                break  # it waits, still never admitted: what it found cached is looked up again next time
            self.waiting.popleft()
            sequence.computed = hit
            self.free_blocks -= needed
            sequence.blocks += needed
            sequence.cached_tokens = max(sequence.cached_tokens, hit)
            sequence.status = "running"
            self.running.append(sequence)
            if first_admission:
                result.new_prompt_tokens += sequence.prompt_tokens
                result.new_cached_tokens += hit
                result.admitted.append(sequence.request_id)
            budget -= tokens
            work.append((sequence, tokens))
        result.left_waiting = [s.request_id for s in self.waiting if s.computed == 0 and s.preemptions == 0]

        decoding = 0
        for sequence, tokens in work:
            if sequence.prefilling:
                result.prefill_tokens += tokens
                sequence.computed += tokens
                if not sequence.prefilling:  # prefill done: the same step samples the next token
                    self._emit(sequence, 1, result)
            else:
                decoding += 1
                result.decode_tokens += tokens
                self._emit(sequence, self._decode(sequence, result), result)
                result.decoded.append(sequence.request_id)
        result.prefill_s = config.prefill_ms_per_token * result.prefill_tokens / 1000
        result.duration_s = (config.step_base_ms + config.decode_ms_per_seq * decoding) / 1000 + result.prefill_s
        return result

    # --- internals --------------------------------------------------------------------------------------

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.config.block_size)

    @staticmethod
    def _kv_after(sequence: Sequence, tokens: int, computed: int | None = None) -> int:
        """KV tokens ``sequence`` holds after computing ``tokens`` more than ``computed`` (by default what it has
        computed), the token it may sample included."""
        computed = sequence.computed if computed is None else computed
        completes_prefill = computed < sequence.context <= computed + tokens
        return computed + tokens + (1 if completes_prefill else 0)

    def _reserve(self, sequence: Sequence, tokens: int, result: StepResult) -> bool:
        """Grow ``sequence`` to hold ``tokens``, preempting the newest running sequences if blocks run out."""
        needed = self._blocks_for(tokens) - sequence.blocks
        while needed > self.free_blocks:
            victim = self.running[-1]
            self._preempt(victim, result)
            if victim is sequence:
                return False
        if needed > 0:
            self.free_blocks -= needed
            sequence.blocks += needed
        return True

    def _preempt(self, sequence: Sequence, result: StepResult) -> None:
        self.running.remove(sequence)
        self._free(sequence)
        sequence.computed = 0
        sequence.preemptions += 1
        sequence.status = "waiting"
        self.waiting.appendleft(sequence)
        result.preempted.append(sequence.request_id)

    def _free(self, sequence: Sequence) -> None:
        self.free_blocks += sequence.blocks
        sequence.blocks = 0

    def _prefix_hit(self, sequence: Sequence, result: StepResult) -> int:
        if not (self.config.prefix_caching and sequence.prefix_key and sequence.prefix_tokens):
            return 0
        result.prefix_queries += sequence.prompt_tokens
        cached = self._prefix_cache.get(sequence.prefix_key, 0)
        if not cached:
            return 0
        self._prefix_cache.move_to_end(sequence.prefix_key)
        # keep at least one prompt token to compute, as engines do, so the step has logits to sample
        hit = min(cached, sequence.prefix_tokens, sequence.prompt_tokens - 1)
        hit -= hit % self.config.block_size  # caches hold whole blocks
        result.prefix_hits += hit
        return hit

    def _decode(self, sequence: Sequence, result: StepResult) -> int:
        """Tokens one decode step yields for ``sequence``: accepted drafts plus the bonus token."""
        spec = self.config.spec_decode
        if spec is None:
            return 1
        collapsed = sequence.collapsed()
        if collapsed:
            result.collapsed.append(sequence.request_id)
        acceptance = spec.collapsed_acceptance if collapsed else spec.acceptance
        accepted = 0
        while accepted < spec.draft_tokens and self.rng.random() < acceptance:
            accepted += 1
        if collapsed:
            remaining = sequence.max_tokens - sequence.generated
            expected = self._expected_yield(spec, remaining)
            result.collapse_added[sequence.request_id] = max(0.0, 1.0 - min(accepted + 1, remaining) / expected)
        result.spec_drafts += 1
        result.spec_draft_tokens += spec.draft_tokens
        result.spec_accepted += accepted
        if len(result.spec_accepted_per_position) < spec.draft_tokens:
            result.spec_accepted_per_position.extend([0] * (spec.draft_tokens - len(result.spec_accepted_per_position)))
        for position in range(accepted):
            result.spec_accepted_per_position[position] += 1
        return accepted + 1

    @staticmethod
    def _expected_yield(spec: SpecDecodeConfig, remaining: int) -> float:
        """Tokens one decode step yields on average at normal acceptance, capped at ``remaining``: the step's
        (i + 1)-th token comes when its first i drafts are all accepted, with probability acceptance ** i."""
        return sum(spec.acceptance**i for i in range(min(spec.draft_tokens + 1, remaining)))

    def _emit(self, sequence: Sequence, tokens: int, result: StepResult) -> None:
        tokens = min(tokens, sequence.max_tokens - sequence.generated)
        sequence.generated += tokens
        sequence.computed = sequence.context  # rejected drafts leave no KV behind
        result.emitted[sequence.request_id] = result.emitted.get(sequence.request_id, 0) + tokens
        if sequence.generated >= sequence.max_tokens:
            self._finish(sequence, result)

    def _finish(self, sequence: Sequence, result: StepResult) -> None:
        sequence.status = "finished"
        self.running.remove(sequence)
        self._free(sequence)
        del self.sequences[sequence.request_id]
        result.finished.append(sequence.request_id)
        if self.config.prefix_caching and sequence.prefix_key and sequence.prefix_tokens:
            self._prefix_cache[sequence.prefix_key] = sequence.prefix_tokens
            self._prefix_cache.move_to_end(sequence.prefix_key)
            while len(self._prefix_cache) > self.config.prefix_cache_entries:
                self._prefix_cache.popitem(last=False)
