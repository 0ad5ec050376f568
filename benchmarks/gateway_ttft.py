"""How close the TTFT `streamscope gateway` records is to llama-server's own account of the same request.

llama-server says in its final chunk how long it took to process the prompt (``timings.prompt_ms``); on an idle
server a request starts at once, so that is its time to the first token, less the HTTP and template work around it.
The gateway's TTFT is from the request's receipt to its first content chunk relayed. Each stream here runs alone
(one at a time, prompts of several lengths), from the SDK's client, in turn direct to the engine and through the
gateway; the table gives each recorded TTFT less the engine's prompt_ms, per prompt length, with the load average:
what the client direct sees beyond prompt_ms is the engine's own work outside it (parsing, templating, tokenizing),
the baseline the gateway's figure is read against.

    python -m benchmarks.gateway_ttft [--streams 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import httpx

from streamscope import otlp_exporter, setup, stream_sse
from streamscope_cli.llama.build import ensure_server
from streamscope_cli.llama.models import TINY, ensure_model
from streamscope_cli.llama.server import LlamaServer, ServerOptions
from streamscope_cli.workload.llama_eval import gateway_process
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector

PROMPT_TOKENS = (20, 500, 2000, 4000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=40, help="streams per prompt length and path")
    args = parser.parse_args()
    store = tempfile.TemporaryDirectory(prefix="streamscope-ttft-")
    collector = Collector(CollectorConfig(storage_dsn=f"chdb://{store.name}", http_port=0, grpc_port=None)).start()
    provider = setup("ttft-client", set_global=False, exporter=otlp_exporter(collector.http_url))
    sent: list[tuple[str, int, float]] = []  # path, prompt tokens, the engine's prompt_ms
    load = [os.getloadavg()[0]]
    try:
        options = ServerOptions(ensure_model(TINY), parallel=1, context=8192, batch=8192)
        with LlamaServer(ensure_server(), options) as engine, gateway_process(engine.url, collector.http_url) as gw:
            bases = {"direct": engine.url, "gateway": gw.listening_url}
            with httpx.Client(timeout=120) as client:
                for tokens in PROMPT_TOKENS:
                    for index in range(args.streams):
                        for path, base in bases.items():
                            prompt = f"{index} {path} " + "ab " * (tokens // 2)
                            body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 8, "stream": True}
                            url = f"{base}/v1/chat/completions"
                            with stream_sse(client, "POST", url, json=body, tracer_provider=provider) as events:
                                last = [e.payload for e in events if isinstance(e.payload, dict)][-1]
                            sent.append((path, tokens, float(last["timings"]["prompt_ms"])))
            load.append(os.getloadavg()[0])
        provider.shutdown()
        time.sleep(2)
        query = "SELECT ttft_us / 1000 FROM streams WHERE side = {side:String} ORDER BY start_time"
        clients = [row[0] for row in collector.query_client.query(query, parameters={"side": "client"}).result_rows]
        gateways = [row[0] for row in collector.query_client.query(query, parameters={"side": "gateway"}).result_rows]
    finally:
        collector.stop()
        store.cleanup()
    through = iter(gateways)
    columns: dict[tuple[int, str], list[float]] = {}
    for (path, tokens, prompt_ms), client_ms in zip(sent, clients, strict=True):
        if path == "direct":
            columns.setdefault((tokens, "client direct"), []).append(client_ms - prompt_ms)
        else:
            gateway_ms = next(through)
            columns.setdefault((tokens, "gateway"), []).append(gateway_ms - prompt_ms)
            columns.setdefault((tokens, "client via gateway"), []).append(client_ms - prompt_ms)
    print(f"TTFT less llama-server's prompt_ms (ms), {args.streams} streams each, load {load[0]:.1f}->{load[-1]:.1f}")
    print(f"{'prompt tokens':>13} {'recorded by':>20} {'p50':>7} {'p90':>7} {'max':>7}")
    for (tokens, who), differences in sorted(columns.items()):
        differences.sort()
        p90 = differences[round(0.9 * (len(differences) - 1))]
        print(f"{tokens:>13} {who:>20} {statistics.median(differences):>7.2f} {p90:>7.2f} {differences[-1]:>7.2f}")


if __name__ == "__main__":
    main()
