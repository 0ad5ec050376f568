"""Tiny llama-architecture GGUF models with random weights, written here instead of downloaded.

The weights are drawn from a seeded generator, so a model is the same file on every machine. The vocabulary is a
GPT-2 style byte-level BPE: the 256 byte tokens (token id = byte value), a few merges, and chat control tokens, with
a ChatML template so ``/v1/chat/completions`` works.

What the text looks like is shaped by the output layer alone: only printable ASCII tokens and the merges get
non-zero rows, scaled so the logits are peaked, and the layers add small residual updates. The model then behaves
much like a bigram table over readable characters: streams are valid UTF-8, never end early on an end-of-turn token
and, as every model with one seed and width draws the same embeddings, output and first layers, a model with fewer
layers agrees with a larger one often enough to be its draft for speculative decoding.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import gguf
import numpy as np

from streamscope_cli.llama.build import Announce
from streamscope_cli.llama.cache import cache_dir, ensure_entry

FORMAT = 1
"""Bumped whenever what a spec writes changes, so cached files of the old layout are not taken for new ones."""

MERGES = ("Ġ t", "h e", "i n", "e r", "a n", "Ġ a", "o n", "r e", "Ġ s", "e n", "Ġt he", "o u")
CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class ModelSpec:
    """A model's shape and seed: everything its file is made from."""

    name: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    context_length: int = 4096
    seed: int = 1
    logit_scale: float = 6.0  # the spread of the logits of the tokens the model may say
    residual_scale: float = 0.1  # how far each layer moves the residual stream: the less, the more a draft agrees


TINY = ModelSpec("tiny", n_embd=64, n_layer=2, n_head=2, n_head_kv=2, n_ff=128, context_length=32768)
"""Streams as fast as the server can send: a fraction of a millisecond a token. Its context takes prompts long
enough for their prefill to hold up the streams decoding beside them (llama-server caps ``-c`` at it)."""

LARGER = ModelSpec("larger", n_embd=768, n_layer=12, n_head=12, n_head_kv=4, n_ff=2048)
"""Tens of milliseconds a token on two cores: slow enough for batching and drafts to matter."""

DRAFT = ModelSpec("draft", n_embd=768, n_layer=1, n_head=12, n_head_kv=4, n_ff=2048)
"""LARGER's first layer alone, with its embeddings and output: LARGER's draft model. A third to a half of its drafted
tokens are accepted at the default sampling; a larger ``residual_scale`` on both makes it collapse (0.15: a fifth)."""

SPECS = {spec.name: spec for spec in (TINY, LARGER, DRAFT)}


def model_path(spec: ModelSpec) -> Path:
    """Where ``spec``'s file is (or will be) cached: its name and a hash of everything it is made from."""
    key = hashlib.sha256(repr((FORMAT, sorted(asdict(spec).items()))).encode()).hexdigest()[:12]
    return cache_dir() / "models" / f"{spec.name}-{key}" / f"{spec.name}.gguf"


def ensure_model(spec: ModelSpec, announce: Announce = print) -> Path:
    """``spec``'s GGUF file, written first if the cache has none."""
    path = model_path(spec)
    if not path.is_file():
        started = time.monotonic()
        announce(f"llama.cpp: writing the {spec.name} model ({_parameter_count(spec) / 1e6:.1f} M parameters)")
        ensure_entry(path.parent, lambda staging: write_model(spec, staging / path.name))
        announce(f"llama.cpp: {spec.name} model written in {time.monotonic() - started:.1f} s")
    return path


def write_model(spec: ModelSpec, path: Path) -> None:
    """Write ``spec`` as a GGUF file at ``path``: F16 matrices, F32 norms."""
    tokens, token_types, speakable = vocabulary()
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(f"streamscope {spec.name}")
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_dimension_count(spec.n_embd // spec.n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(list(MERGES))
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    for name, tensor in _tensors(spec, len(tokens), speakable):
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def vocabulary() -> tuple[list[str], list[int], np.ndarray]:
    """Tokens, their GGUF types, and which of them the model may say (printable ASCII bytes and the merges)."""
    byte_text = _bytes_to_unicode()
    tokens = [byte_text[b] for b in range(256)]
    tokens += ["".join(merge.split(" ")) for merge in MERGES]
    types = [int(gguf.TokenType.NORMAL)] * len(tokens)
    tokens += list(CONTROL_TOKENS)
    types += [int(gguf.TokenType.CONTROL)] * len(CONTROL_TOKENS)
    speakable = np.zeros(len(tokens), dtype=bool)
    speakable[32:127] = True
    speakable[256 : 256 + len(MERGES)] = True
    return tokens, types, speakable


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: printable bytes stand for themselves, the rest map to code points from 256 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shifted)
            shifted += 1
    return mapping


def _tensors(spec: ModelSpec, n_vocab: int, speakable: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The weights, drawn in a fixed order (embeddings, output, then layer by layer) from the spec's seed."""
    rng = np.random.default_rng(spec.seed)
    d, head_dim = spec.n_embd, spec.n_embd // spec.n_head
    d_kv = head_dim * spec.n_head_kv

    def matrix(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * (scale / np.sqrt(cols))).astype(np.float16)

    output = matrix(n_vocab, d, spec.logit_scale)
    output[~speakable] = 0
    tensors = [
        ("token_embd.weight", rng.standard_normal((n_vocab, d), dtype=np.float32).astype(np.float16)),
        ("output.weight", output),
        ("output_norm.weight", np.ones(d, dtype=np.float32)),
    ]
    for layer in range(spec.n_layer):
        blk = f"blk.{layer}"
        tensors += [
            (f"{blk}.attn_norm.weight", np.ones(d, dtype=np.float32)),
            (f"{blk}.attn_q.weight", matrix(d, d)),
            (f"{blk}.attn_k.weight", matrix(d_kv, d)),
            (f"{blk}.attn_v.weight", matrix(d_kv, d)),
            (f"{blk}.attn_output.weight", matrix(d, d, spec.residual_scale)),
            (f"{blk}.ffn_norm.weight", np.ones(d, dtype=np.float32)),
            (f"{blk}.ffn_gate.weight", matrix(spec.n_ff, d)),
            (f"{blk}.ffn_up.weight", matrix(spec.n_ff, d)),
            (f"{blk}.ffn_down.weight", matrix(d, spec.n_ff, spec.residual_scale)),
        ]
    return tensors


def _parameter_count(spec: ModelSpec) -> int:
    d_kv = spec.n_embd // spec.n_head * spec.n_head_kv
    per_layer = 2 * spec.n_embd * (spec.n_embd + d_kv) + 3 * spec.n_embd * spec.n_ff
    return 2 * len(vocabulary()[0]) * spec.n_embd + spec.n_layer * per_layer
