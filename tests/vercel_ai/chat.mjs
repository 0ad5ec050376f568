// A chat app on the Vercel AI SDK, as its users run it: streamText through the SDK's OpenAI provider to an engine,
// with the SDK's telemetry on, and a plain OpenTelemetry JS SDK exporting the spans over OTLP/HTTP to a collector
// (and keeping a copy, printed as JSON, for the test to compare).
//
//     node tests/vercel_ai/chat.mjs ENGINE_URL COLLECTOR_URL [CALLS]

import { createOpenAI } from "@ai-sdk/openai";
import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { streamText } from "ai";

const [engineUrl, collectorUrl, calls = "2"] = process.argv.slice(2);
const copies = new InMemorySpanExporter();
const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ "service.name": "chat-vercel-ai" }),
  spanProcessors: [
    new SimpleSpanProcessor(new OTLPTraceExporter({ url: `${collectorUrl}/v1/traces` })),
    new SimpleSpanProcessor(copies),
  ],
});
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
trace.setGlobalTracerProvider(provider);

const openai = createOpenAI({ baseURL: `${engineUrl}/v1`, apiKey: "unused" });
const nowNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));
const ns = ([seconds, nanos]) => (BigInt(seconds) * 1_000_000_000n + BigInt(nanos)).toString();

const received = [];
for (let call = 0; call < Number(calls); call++) {
  const started = nowNs();
  const result = streamText({
    model: openai.chat("sim-llm"),
    prompt: `say something, call ${call}`,
    maxOutputTokens: 40,
    maxRetries: 0,
    experimental_telemetry: { isEnabled: true },
  });
  const arrivals = [];
  for await (const _ of result.textStream) arrivals.push(nowNs().toString());
  received.push({ started_ns: started.toString(), arrivals_ns: arrivals });
}
// a call the engine refuses (no messages): the SDK reports it through onError, the stream just ends
const refused = streamText({
  model: openai.chat("sim-llm"),
  messages: [],
  maxRetries: 0,
  experimental_telemetry: { isEnabled: true },
  onError: () => {},
});
for await (const _ of refused.textStream);

await provider.forceFlush();
const spans = copies.getFinishedSpans().map((span) => ({
  trace_id: span.spanContext().traceId,
  span_id: span.spanContext().spanId,
  name: span.name,
  scope: span.instrumentationScope.name,
  start_ns: ns(span.startTime),
  end_ns: ns(span.endTime),
  status: span.status.code,
  events: span.events.map((event) => [event.name, ns(event.time)]),
  attributes: span.attributes,
}));
await provider.shutdown();
console.log(JSON.stringify({ received, spans }));
