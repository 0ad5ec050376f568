"""The generated models: the same file from the same spec, a different cache key for any other."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gguf

from streamscope_cli.llama.models import CONTROL_TOKENS, MERGES, TINY, model_path, write_model


def test_a_spec_writes_the_same_bytes_every_time(tmp_path: Path) -> None:
    write_model(TINY, tmp_path / "a.gguf")
    write_model(TINY, tmp_path / "b.gguf")
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()


def test_the_file_holds_a_byte_level_bpe_vocabulary_and_the_spec_shape(tmp_path: Path) -> None:
    write_model(TINY, tmp_path / "tiny.gguf")
    reader = gguf.GGUFReader(tmp_path / "tiny.gguf")

    def text(key: str) -> list[str]:
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode() for i in field.data]

    tokens = text("tokenizer.ggml.tokens")
    assert len(tokens) == 256 + len(MERGES) + len(CONTROL_TOKENS)
    assert tokens[ord("a")] == "a" and tokens[ord(" ")] == "Ġ"
    assert text("tokenizer.ggml.merges") == list(MERGES)
    assert text("tokenizer.ggml.model") == ["gpt2"]
    block_count = reader.fields["llama.block_count"]
    assert int(block_count.parts[block_count.data[0]][0]) == TINY.n_layer


def test_any_change_of_spec_is_another_cache_entry() -> None:
    paths = {
        model_path(TINY),
        model_path(dataclasses.replace(TINY, seed=2)),
        model_path(dataclasses.replace(TINY, n_ff=96)),
    }
    assert len(paths) == 3
