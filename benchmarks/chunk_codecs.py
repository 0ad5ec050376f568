"""Compressed bytes per chunk on disk for candidate column codecs of the ``chunks`` table.

Generates realistic chunk timelines (lognormal inter-chunk gaps around 25 ms with occasional stalls, 1-4
tokens per chunk, OpenAI-sized SSE envelopes), stores the same rows once per codec variant on the embedded
engine, and prints each column's compressed bytes per chunk. The migration's codecs are the winners here, or lose
little here and much on the wider sizes real fleets send (LowCardinality: docs/benchmarks.md).

    python -m benchmarks.chunk_codecs [--quick] [--streams 4000] [--chunks 250]
"""

from __future__ import annotations

import argparse
import tempfile

import clickhouse_connect
import numpy as np

VARIANTS: dict[str, list[str]] = {
    "offset_us UInt64": ["ZSTD(1)", "Delta, ZSTD(1)", "DoubleDelta, ZSTD(1)", "T64, ZSTD(1)"],
    "offset_us UInt32": ["Delta, ZSTD(1)", "T64, ZSTD(1)"],
    "gap_us UInt32": ["ZSTD(1)", "T64, ZSTD(1)", "T64, LZ4", "Delta, ZSTD(1)"],
    "seq UInt32": ["ZSTD(1)", "Delta, ZSTD(1)", "DoubleDelta, ZSTD(1)"],
    "content_index Int32": ["Delta, ZSTD(1)", "DoubleDelta, ZSTD(1)"],
    "tokens UInt16": ["ZSTD(1)", "T64, ZSTD(1)"],
    "tokens LowCardinality(UInt16)": ["ZSTD(1)"],
    "content_bytes UInt32": ["ZSTD(1)", "T64, ZSTD(1)"],
    "content_bytes LowCardinality(UInt32)": ["ZSTD(1)"],
    "wire_bytes UInt32": ["ZSTD(1)", "T64, ZSTD(1)", "Delta, ZSTD(1)"],
    "wire_bytes LowCardinality(UInt32)": ["ZSTD(1)"],
    "content_bytes_long_tail UInt32": ["T64, ZSTD(1)"],
    "content_bytes_long_tail LowCardinality(UInt32)": ["ZSTD(1)"],
    "wire_bytes_five_envelopes UInt32": ["T64, ZSTD(1)"],
    "wire_bytes_five_envelopes LowCardinality(UInt32)": ["ZSTD(1)"],
    "trace_id String": ["ZSTD(1)", "LZ4"],
    "trace_id FixedString(16)": ["ZSTD(1)"],
    "start_time DateTime64(6)": ["Delta, ZSTD(1)", "ZSTD(1)"],
}


def synthetic_chunks(streams: int, chunks: int, seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(chunks // 2, chunks * 3 // 2, size=streams)
    total = int(lengths.sum())
    stream_of = np.repeat(np.arange(streams), lengths)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    seq = np.arange(total) - np.repeat(starts, lengths)
    gaps = rng.lognormal(np.log(25_000), 0.35, size=total)
    stalls = rng.random(total) < 0.003
    gaps[stalls] += rng.uniform(300_000, 2_000_000, size=int(stalls.sum()))
    first = seq == 0
    gaps[first] = rng.lognormal(np.log(350_000), 0.5, size=streams)
    gaps = gaps.astype(np.uint32)
    offsets = np.zeros(total, dtype=np.uint64)
    for s, n in zip(starts, lengths):
        offsets[s : s + n] = np.cumsum(gaps[s : s + n], dtype=np.uint64)
    tokens = rng.choice([1, 1, 1, 2, 3, 4], size=total).astype(np.uint16)
    content = (tokens * rng.integers(2, 7, size=total)).astype(np.uint32)
    wire = (content + 180 + rng.integers(0, 40, size=total)).astype(np.uint32)
    trace_ids = np.array([rng.bytes(16).hex() for _ in range(streams)])
    start_us = np.sort(rng.integers(0, 3_600_000_000, size=streams)) + 1_790_000_000_000_000
    return {
        "stream": stream_of,
        "seq": seq.astype(np.uint32),
        "content_index": seq.astype(np.int32),
        "offset_us": offsets,
        "gap_us": gaps,
        "tokens": tokens,
        "content_bytes": content,
        "wire_bytes": wire,
        "trace_id": trace_ids[stream_of],
        "start_time": start_us[stream_of],
    }


def wider_sizes(data: dict[str, np.ndarray], seed: int = 11) -> dict[str, np.ndarray]:
    """Sizes with more than 256 distinct values, where LowCardinality's indexes take two bytes: content with a long
    tail (several tokens a chunk, or a provider that sends larger chunks), and wire bytes over five providers'
    envelopes."""
    rng = np.random.default_rng(seed)
    content = np.maximum(1, rng.lognormal(np.log(12), 0.9, size=data["seq"].size)).astype(np.uint32)
    envelopes = rng.choice([0, 70, 150, 260, 400], size=int(data["stream"].max()) + 1)[data["stream"]]
    return {
        "content_bytes_long_tail": content,
        "wire_bytes_five_envelopes": (data["wire_bytes"] + envelopes).astype(np.uint32),
    }


def measure(client, data: dict[str, np.ndarray]) -> list[tuple[str, str, float]]:
    rows = len(data["seq"])
    results = []
    for column, codecs in VARIANTS.items():
        name, ch_type = column.split(" ", 1)
        values = data[name]
        if ch_type.startswith("FixedString"):
            values = [bytes.fromhex(v) for v in values]
        elif ch_type.startswith("DateTime64"):
            values = values.tolist()  # epoch microseconds as ints: the driver writes them as ticks
        for codec in codecs:
            client.command("DROP TABLE IF EXISTS codec_probe")
            client.command(
                f"CREATE TABLE codec_probe (stream UInt32, seq UInt32, v {ch_type} CODEC({codec})) "
                "ENGINE = MergeTree ORDER BY (stream, seq) SETTINGS min_bytes_for_wide_part = 0",
                settings={"allow_suspicious_low_cardinality_types": 1},
            )
            client.insert(
                "codec_probe",
                [data["stream"].astype(np.uint32), data["seq"], values],
                column_names=["stream", "seq", "v"],
                column_oriented=True,
            )
            client.command("OPTIMIZE TABLE codec_probe FINAL")
            size = client.query(
                "SELECT sum(data_compressed_bytes) FROM system.columns "
                "WHERE database = currentDatabase() AND table = 'codec_probe' AND name = 'v'"
            ).result_rows[0][0]
            results.append((column, codec, size / rows))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="400 streams: the same table, sooner")
    parser.add_argument("--streams", type=int, default=4000)
    parser.add_argument("--chunks", type=int, default=250, help="mean chunks per stream")
    args = parser.parse_args()
    if args.quick:
        args.streams = 400
    data = synthetic_chunks(args.streams, args.chunks)
    data |= wider_sizes(data)
    with tempfile.TemporaryDirectory() as tmp:
        client = clickhouse_connect.get_client(interface="chdb", path=tmp)
        results = measure(client, data)
    print(f"{len(data['seq']):,} chunks in {args.streams:,} streams")
    print(f"{'column':48} {'codec':24} {'bytes/chunk':>12}")
    for column, codec, per_chunk in results:
        print(f"{column:48} {codec:24} {per_chunk:12.3f}")


if __name__ == "__main__":
    main()
