// A chat app on the Vercel AI SDK, as its users run it: streamText through the SDK's OpenAI provider to an engine,
// with the SDK's telemetry on, and a plain OpenTelemetry JS SDK exporting the spans over OTLP/HTTP to a collector
// (and keeping a copy, printed as JSON, for the test to compare). SDK 6 turns its telemetry on per call; SDK 7
// (installed as ai-7, and needing Node.js 22) emits the GenAI convention's spans once @ai-sdk/otel is registered.
//
//     node tests/vercel_ai/chat.mjs 6|7 ENGINE_URL COLLECTOR_URL [CALLS [CLOSE_AFTER]]
//
// With CLOSE_AFTER (0: none), the app stops reading each stream once it has that many text parts, as one does when
// the user stops the answer.

import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";

const [sdk, engineUrl, collectorUrl, calls = "2", closeAfter = "0"] = process.argv.slice(2);
const { streamText, registerTelemetry } = await import(sdk === "7" ? "ai-7" : "ai");
const { createOpenAI } = await import(sdk === "7" ? "@ai-sdk/openai-4" : "@ai-sdk/openai");
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
let telemetry = { experimental_telemetry: { isEnabled: true } };
if (sdk === "7") {
  const { OpenTelemetry } = await import("@ai-sdk/otel");
  registerTelemetry(new OpenTelemetry());
  telemetry = {};
}

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
    ...telemetry,
  });
  const arrivals = [];
  for await (const _ of result.textStream) {
    arrivals.push(nowNs().toString());
    if (arrivals.length === Number(closeAfter)) break;
  }
  received.push({ started_ns: started.toString(), arrivals_ns: arrivals });
}
// a call the engine refuses (no messages): the SDK reports it through onError, the stream just ends
const refused = streamText({
  model: openai.chat("sim-llm"),
  messages: [],
  maxRetries: 0,
  ...telemetry,
  onError: () => {},
});
for await (const _ of refused.textStream);

await provider.forceFlush();
const spans = copies.getFinishedSpans().map((span) => ({
  trace_id: span.spanContext().traceId,
  span_id: span.spanContext().spanId,
  name: span.name,
  scope: span.instrumentationScope.name,
  kind: span.kind,
  start_ns: ns(span.startTime),
  end_ns: ns(span.endTime),
  status: span.status.code,
  events: span.events.map((event) => [event.name, ns(event.time)]),
  attributes: span.attributes,
}));
await provider.shutdown();
console.log(JSON.stringify({ received, spans }));
