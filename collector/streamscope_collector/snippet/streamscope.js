/*
 * streamscope browser snippet: what the user actually saw of each streamed answer.
 *
 * Served by the collector at /sdk/streamscope.js. Dependency-free, an ES module (it also sets
 * window.streamscope):
 *
 *   import { init } from "https://collector.example:4318/sdk/streamscope.js";
 *   const scope = init({ endpoint: "https://collector.example:4318", token: "…", service: "chat-ui" });
 *   const response = await scope.fetch("/v1/chat/completions", { method: "POST", body }, { model: "m" });
 *   // read response.body as usual; optionally call response.streamscope.rendered() after each render
 *
 * or, when the app reads the stream itself:
 *
 *   const stream = scope.stream({ model: "m" });
 *   fetch(url, { headers: { ...stream.headers() } });  // traceparent: the backend's spans join this trace
 *   stream.chunk(text); …; stream.rendered(); …; stream.end("completed");
 *   // a JSON answer or tool call: stream.jsonText(piece) after its chunk (scope.fetch does it by itself when the
 *   // request asks for a JSON response_format, and for a tool call's arguments)
 *
 * or, for one response on an open WebSocket (each message a chunk; OpenAI's Realtime API events by default, or any
 * protocol through a function from a message's data to { text, done }):
 *
 *   const stream = scope.websocket(socket, { model: "m" });  // before sending the request
 *   socket.send(JSON.stringify({ type: "response.create" }));  // it ends with response.done, or the socket's close
 *
 * Per chunk it records the arrival (when the page's code received it), the main-thread work the app spent on
 * it (until it asked for the next chunk, or called rendered()), and the frame that painted it (the first frame
 * after that work), and how much of its wait the page's main thread spent on long tasks (the Long Tasks API);
 * per stream the frames dropped while it streamed and how it ended. One span per stream, side "browser", in
 * the packed encoding of schema/conventions/streaming.yaml, sent as OTLP/HTTP JSON to the collector's browser
 * route (/v1/browser/traces): batched, gzip-compressed where the browser can, and sent with sendBeacon when the
 * page is hidden. Unsampled streams record nothing and tell the backend so.
 */
const VERSION = "1";
const FRAME_MS = 1000 / 60;
const PAINT_WAIT_MS = 1000; // a stream whose last paints never come (a hidden tab) is sent without them
const HOST_GAP_MS = 100; // host delay is measured for the first chunk and for chunks this long after the last
const READ_MS = 50; // a long task that ended this close before a chunk was read is the one the read waited out
const LONG_TASKS_KEPT = 500; // the page's most recent long tasks (each at least 50 ms of main-thread work)
const encoder = new TextEncoder();

/** The page's long tasks, from one PerformanceObserver started with the first sampled stream: [start, end]
 * intervals on the performance.now() clock, the most recent LONG_TASKS_KEPT (a stream that saw more loses its
 * earliest). Null where the browser has no Long Tasks API (the spans then say nothing of the host). */
let longTasks;

function watchLongTasks() {
  if (longTasks !== undefined) return longTasks;
  longTasks = null;
  const supported = typeof PerformanceObserver === "undefined" ? [] : PerformanceObserver.supportedEntryTypes || [];
  if (!supported.includes("longtask")) return longTasks;
  const intervals = [];
  const add = (entries) => {
    for (const entry of entries) intervals.push([entry.startTime, entry.startTime + entry.duration]);
    if (intervals.length > LONG_TASKS_KEPT) intervals.splice(0, intervals.length - LONG_TASKS_KEPT);
  };
  try {
    const observer = new PerformanceObserver((list) => add(list.getEntries()));
    observer.observe({ type: "longtask", buffered: true });
    // entries are delivered by a later task; takeRecords() has those already reported but not yet delivered
    longTasks = { intervals, collect: () => add(observer.takeRecords()) };
  } catch {
    longTasks = null;
  }
  return longTasks;
}

/** Per chunk, the time (us) of its wait that the page's main thread was in the long task it waited out: the
 * longest that ended at most READ_MS before the chunk was read (what arrived during an earlier one was read when
 * that one ended; a short one while the page worked through what had arrived does not hide it). Measured from the
 * stream's start for the first chunk, from the chunk before for one that came HOST_GAP_MS or more after it; 0 for
 * the rest. */
export function hostDelays(start, arrivals, tasks) {
  tasks.collect();
  const end = arrivals.length ? arrivals[arrivals.length - 1] : start;
  const busy = tasks.intervals.filter(([from, to]) => to > start && from < end);
  return arrivals.map((now, i) => {
    const since = i ? arrivals[i - 1] : start;
    if (i && now - since < HOST_GAP_MS) return 0;
    let held = 0;
    for (const [from, to] of busy) {
      if (to <= now && to >= now - READ_MS) held = Math.max(held, to - Math.max(from, since));
    }
    return Math.round(held * 1000);
  });
}

function hex(bytes) {
  const values = crypto.getRandomValues(new Uint8Array(bytes));
  return Array.from(values, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Calls back with the time just after the next frame was painted (its animation frame, then a task). */
function afterNextPaint(callback) {
  requestAnimationFrame(() => {
    const channel = new MessageChannel();
    channel.port1.onmessage = () => callback(performance.now());
    channel.port2.postMessage(null);
  });
}

function unixNanos(ms) {
  return (BigInt(Math.round((performance.timeOrigin + ms) * 1000)) * 1000n).toString();
}

function quantile(values, q) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

function attribute(key, value) {
  if (Array.isArray(value)) return { key, value: { arrayValue: { values: value.map((v) => attribute(key, v).value) } } };
  if (typeof value === "boolean") return { key, value: { boolValue: value } };
  if (typeof value === "number") {
    return { key, value: Number.isInteger(value) ? { intValue: value } : { doubleValue: value } };
  }
  return { key, value: { stringValue: String(value) } };
}

/** A packed chunk array as bytes of little-endian int64s (base64 in OTLP/JSON): half the JSON of an int array,
 * and the collector reads it without a message per element. */
function int64Attribute(key, values) {
  const view = new DataView(new ArrayBuffer(values.length * 8));
  values.forEach((value, i) => {
    const v = Math.round(value);
    view.setUint32(i * 8, v >>> 0, true);
    view.setInt32(i * 8 + 4, Math.floor(v / 2 ** 32), true);
  });
  const bytes = new Uint8Array(view.buffer);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return { key, value: { bytesValue: btoa(binary) } };
}

/** Generated content in one server-sent event: OpenAI chat and Responses, Anthropic Messages, vLLM, SGLang, TGI. */
export function contentOf(event) {
  if (!event || typeof event !== "object") return "";
  let text = "";
  for (const choice of event.choices || []) {
    const delta = choice.delta || {};
    for (const key of ["content", "reasoning_content", "reasoning", "refusal"]) {
      if (typeof delta[key] === "string") text += delta[key];
    }
    for (const call of delta.tool_calls || []) {
      if (call.function && typeof call.function.arguments === "string") text += call.function.arguments;
    }
  }
  if (typeof event.delta === "string" && typeof event.type === "string" && event.type.endsWith(".delta")) {
    text += event.delta; // Responses API
  } else if (event.delta && typeof event.delta === "object") {
    for (const key of ["text", "thinking", "partial_json"]) {
      if (typeof event.delta[key] === "string") text += event.delta[key]; // Anthropic Messages
    }
  }
  return text;
}

/** The JSON in one server-sent event: the answer's text, and the arguments of the tool call it streams (its index). */
export function jsonPartsOf(event) {
  const parts = { answer: "", args: "", call: 0 };
  if (!event || typeof event !== "object") return parts;
  let call = null;
  for (const choice of event.choices || []) {
    const delta = choice.delta || {};
    if (typeof delta.content === "string") parts.answer += delta.content;
    for (const tool of delta.tool_calls || []) {
      const piece = tool.function && tool.function.arguments;
      if (typeof piece !== "string") continue;
      const index = Number.isInteger(tool.index) ? tool.index : 0;
      call ??= index;
      if (index === call) parts.args += piece;
    }
  }
  const at = Number.isInteger(event.output_index) ? event.output_index : Number.isInteger(event.index) ? event.index : 0;
  if (event.type === "response.output_text.delta" && typeof event.delta === "string") parts.answer += event.delta;
  if (event.type === "response.function_call_arguments.delta" && typeof event.delta === "string") {
    parts.args += event.delta;
    call = at;
  }
  if (event.delta && typeof event.delta === "object") {
    if (event.delta.type === "text_delta" && typeof event.delta.text === "string") parts.answer += event.delta.text;
    if (event.delta.type === "input_json_delta" && typeof event.delta.partial_json === "string") {
      parts.args += event.delta.partial_json;
      call = at;
    }
  }
  parts.call = call ?? 0;
  return parts;
}

/** What an OpenAI-style delta withdraws of the content shown before it: {"retract": {"bytes": N, "tokens": K}}. */
export function retractionOf(event) {
  for (const choice of (event && event.choices) || []) {
    const retract = choice.delta && choice.delta.retract;
    if (retract && Number.isInteger(retract.bytes) && retract.bytes > 0) {
      return { bytes: retract.bytes, tokens: Number.isInteger(retract.tokens) && retract.tokens > 0 ? retract.tokens : 0 };
    }
  }
  return null;
}

/** Whether a request body asks for the answer as JSON (a JSON response_format, or the Responses API's text.format). */
const REALTIME_DELTAS = new Set([
  "response.output_text.delta",
  "response.text.delta",
  "response.output_audio_transcript.delta",
  "response.audio_transcript.delta",
  "response.function_call_arguments.delta",
]);

/** What one message of OpenAI's Realtime API carried: its text delta (audio deltas carry none: their bytes count on
 * the wire), whether it ended the response (response.done, or an error event) and the error it ended with. */
export function realtimeOf(data) {
  let event = null;
  try {
    event = typeof data === "string" ? JSON.parse(data) : null;
  } catch {
    event = null;
  }
  if (!event || typeof event !== "object") return { text: "", done: false };
  if (REALTIME_DELTAS.has(event.type)) return { text: typeof event.delta === "string" ? event.delta : "", done: false };
  if (event.type === "error") return { text: "", done: true, error: { name: (event.error && event.error.type) || "error" } };
  if (event.type !== "response.done") return { text: "", done: false };
  const failed = event.response && event.response.status === "failed";
  return { text: "", done: true, error: failed ? { name: "failed" } : null };
}

export function jsonAnswerRequested(body) {
  let request = body;
  if (typeof body === "string") {
    try {
      request = JSON.parse(body);
    } catch {
      return false;
    }
  }
  const format = request && (request.response_format || (request.text && request.text.format));
  return Boolean(format) && (format.type === "json_object" || format.type === "json_schema");
}

const JSON_MAX_FIELDS = 32;
const [VALUE, VALUE_OR_CLOSE, KEY, KEY_OR_CLOSE, COLON, AFTER, DONE, FAILED] = [0, 1, 2, 3, 4, 5, 6, 7];
const SPACE = /[ \t\n\r]*/y;
const STRING_RUN = /[^"\\\x00-\x1f]*/y;
const SCALAR_RUN = /[-+.0-9a-zA-Z]*/y;
const NUMBER = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$/;
const HEX = /^[0-9a-fA-F]$/;

function runEnd(pattern, text, i) {
  pattern.lastIndex = i;
  pattern.exec(text);
  return pattern.lastIndex;
}

function validScalar(token) {
  return token === "true" || token === "false" || token === "null" || NUMBER.test(token);
}

/** When each top-level field of a JSON document streamed in pieces became complete: the browser's twin of the
 * Python SDK's JsonProgress (streamscope/_internal/json_progress.py), reading each piece's new text once. */
export class JsonProgress {
  constructor() {
    this.state = VALUE;
    this.stack = [];
    this.inString = false;
    this.inKey = false;
    this.escape = "";
    this.keyParts = [];
    this.key = "";
    this.item = 0;
    this.scalar = "";
    this.fields = []; // [name, time] of the first JSON_MAX_FIELDS top-level fields, in the order they completed
    this.fieldCount = 0;
    this.startedAt = null;
    this.validAt = null;
    this.lastAt = null;
  }

  get outcome() {
    if (this.state === FAILED) return "malformed";
    return this.validAt !== null ? "valid" : "truncated";
  }

  feed(text, now) {
    if (this.state === FAILED || !text) return;
    if (this.startedAt === null) {
      if (runEnd(SPACE, text, 0) === text.length) return;
      this.startedAt = now;
    }
    this.lastAt = now;
    let i = 0;
    while (i < text.length && this.state !== FAILED) {
      if (this.inString) i = this.string(text, i, now);
      else if (this.scalar) i = this.scalarToken(text, i, now);
      else {
        i = runEnd(SPACE, text, i);
        if (i < text.length) i = this.token(text, i, now);
      }
    }
  }

  finish() {
    if (this.scalar && !this.stack.length && this.state === VALUE) {
      const token = this.scalar;
      this.scalar = "";
      if (validScalar(token)) {
        this.validAt = this.lastAt;
        this.state = DONE;
      } else this.state = FAILED;
    }
  }

  token(text, i, now) {
    const c = text[i];
    const state = this.state;
    const top = this.stack[this.stack.length - 1];
    if (c === '"' && [KEY, KEY_OR_CLOSE, VALUE, VALUE_OR_CLOSE].includes(state)) {
      this.inString = true;
      this.inKey = state === KEY || state === KEY_OR_CLOSE;
      return i + 1;
    }
    if ((c === "{" || c === "[") && (state === VALUE || state === VALUE_OR_CLOSE)) {
      this.stack.push(c);
      this.state = c === "{" ? KEY_OR_CLOSE : VALUE_OR_CLOSE;
      return i + 1;
    }
    if ((c === "}" || c === "]") && top === (c === "}" ? "{" : "[")) {
      if (state === AFTER || state === (c === "}" ? KEY_OR_CLOSE : VALUE_OR_CLOSE)) {
        this.stack.pop();
        this.valueDone(now);
        return i + 1;
      }
    } else if (c === ":" && state === COLON) {
      this.state = VALUE;
      return i + 1;
    } else if (c === "," && state === AFTER && this.stack.length) {
      if (top === "{") this.state = KEY;
      else {
        this.state = VALUE;
        if (this.stack.length === 1) this.item += 1;
      }
      return i + 1;
    } else if ("-0123456789tfn".includes(c) && (state === VALUE || state === VALUE_OR_CLOSE)) {
      return this.scalarToken(text, i, now);
    }
    this.state = FAILED;
    return text.length;
  }

  scalarToken(text, i, now) {
    const end = runEnd(SCALAR_RUN, text, i);
    this.scalar += text.slice(i, end);
    if (end === text.length) return end;
    const token = this.scalar;
    this.scalar = "";
    if (validScalar(token)) this.valueDone(now);
    else this.state = FAILED;
    return end;
  }

  string(text, i, now) {
    if (this.escape) return this.escapeSequence(text, i);
    const run = runEnd(STRING_RUN, text, i);
    const topKey = this.inKey && this.stack.length === 1;
    if (topKey) this.keyParts.push(text.slice(i, run));
    if (run === text.length) return run;
    const c = text[run];
    if (c === '"') {
      this.inString = false;
      if (this.inKey) {
        if (topKey) {
          this.key = JSON.parse(`"${this.keyParts.join("")}"`);
          this.keyParts = [];
        }
        this.state = COLON;
      } else this.valueDone(now);
      return run + 1;
    }
    if (c === "\\") {
      this.escape = "\\";
      return this.escapeSequence(text, run + 1);
    }
    this.state = FAILED; // a raw control character
    return text.length;
  }

  escapeSequence(text, i) {
    let escape = this.escape;
    let complete = false;
    while (i < text.length) {
      escape += text[i];
      i += 1;
      if (escape.length === 2) {
        if ('"\\/bfnrt'.includes(escape[1])) {
          complete = true;
          break;
        }
        if (escape[1] !== "u") {
          this.state = FAILED;
          return text.length;
        }
      } else if (!HEX.test(escape[escape.length - 1])) {
        this.state = FAILED;
        return text.length;
      } else if (escape.length === 6) {
        complete = true;
        break;
      }
    }
    if (!complete) {
      this.escape = escape;
      return i;
    }
    this.escape = "";
    if (this.inKey && this.stack.length === 1) this.keyParts.push(escape);
    return i;
  }

  valueDone(now) {
    const depth = this.stack.length;
    if (depth === 0) {
      this.validAt = now;
      this.state = DONE;
      return;
    }
    this.state = AFTER;
    if (depth === 1) {
      this.fieldCount += 1;
      if (this.fields.length < JSON_MAX_FIELDS) {
        this.fields.push([this.stack[0] === "{" ? this.key : `[${this.item}]`, now]);
      }
    }
  }
}

/** Server-sent events split across reads: the events each read completes, with their size on the wire. */
class EventSplitter {
  constructor() {
    this.decoder = new TextDecoder();
    this.pending = "";
  }

  push(bytes) {
    this.pending += this.decoder.decode(bytes, { stream: true }).replace(/\r\n?/g, "\n");
    const blocks = this.pending.split("\n\n");
    this.pending = blocks.pop();
    return blocks.map((block) => ({
      data: block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(line[5] === " " ? 6 : 5))
        .join("\n"),
      wireBytes: encoder.encode(block).length + 2,
    }));
  }
}

/** One streamed response seen from this page: its chunk timeline, then one span. */
class Stream {
  constructor(scope, options) {
    this.scope = scope;
    this.options = options;
    this.sampled = Math.random() < scope.sampleRate;
    this.traceId = hex(16);
    this.spanId = hex(8);
    this.start = performance.now();
    this.offsets = [];
    this.arrivals = [];
    this.tokens = [];
    this.contentBytes = [];
    this.wireBytes = [];
    this.renderUs = [];
    this.paintUs = [];
    this.delivery = []; // indices of the chunks the app was last handed and is still working on
    this.paintsPending = 0;
    this.framesDropped = 0;
    this.firstByte = null;
    this.ended = false;
    this.responseId = "";
    this.responseModel = "";
    this.retracted = new Map(); // chunk index -> [bytes, tokens] of the content shown before that it withdrew
    this.json = null; // the JSON document followed (options.json: "content" for a JSON answer, else tool calls)
    this.jsonDocument = "";
    this.jsonCall = null;
    if (this.sampled) {
      this.longTasks = watchLongTasks();
      this.watchFrames();
    }
  }

  /** Headers for the request: the backend continues this trace (sampled or not, as decided here). */
  headers() {
    return { traceparent: `00-${this.traceId}-${this.spanId}-${this.sampled ? "01" : "00"}` };
  }

  /** A chunk reached the page now: its text (or content bytes), tokens when known, bytes it took on the wire. */
  chunk(content, { tokens, wireBytes = 0 } = {}) {
    if (!this.sampled || this.ended) return;
    this.rendered();
    this.delivery = [this.record(performance.now(), content, tokens, wireBytes)];
  }

  /** The chunk recorded last withdrew this much of the content shown before it, from the end (rejected drafts, a
   * replaced suffix); a chunk that only withdraws is recorded with chunk(0) first. */
  retract(bytes, tokens = 0) {
    if (!this.sampled || this.ended || !this.offsets.length || !(bytes > 0)) return;
    const index = this.offsets.length - 1;
    const [size, count] = this.retracted.get(index) || [0, 0];
    this.retracted.set(index, [size + bytes, count + Math.max(0, tokens)]);
  }

  /** The next piece of a JSON document the stream carries ("content": a JSON answer; "tool_call": a tool call's
   * arguments), part of the chunk recorded last. One document a stream: pieces of another are ignored. */
  jsonText(text, document = "content") {
    if (!this.sampled || this.ended || !text) return;
    if (this.json && document !== this.jsonDocument) return;
    this.json ??= new JsonProgress();
    this.jsonDocument = document;
    this.json.feed(text, this.arrivals.length ? this.arrivals[this.arrivals.length - 1] : performance.now());
  }

  followJson(event) {
    const { answer, args, call } = jsonPartsOf(event);
    if (this.options.json === "content") this.jsonText(answer, "content");
    else if (args) {
      this.jsonCall ??= call;
      if (call === this.jsonCall) this.jsonText(args, "tool_call");
    }
  }

  jsonAttributes() {
    const progress = this.json;
    progress.finish();
    const offset = (at) => Math.max(0, Math.round((at - this.start) * 1000));
    const attributes = [
      attribute("streamscope.json.document", this.jsonDocument),
      attribute("streamscope.json.outcome", progress.outcome),
      attribute("streamscope.json.field_count", progress.fieldCount),
    ];
    if (progress.validAt !== null) attributes.push(attribute("streamscope.json.valid_offset_us", offset(progress.validAt)));
    if (progress.fields.length) {
      attributes.push(attribute("streamscope.json.field_names", progress.fields.map(([name]) => name)));
      attributes.push(attribute("streamscope.json.field_offsets_us", progress.fields.map(([, at]) => offset(at))));
    }
    return attributes;
  }

  record(now, content, tokens, wireBytes) {
    const bytes = typeof content === "string" ? encoder.encode(content).length : content || 0;
    this.firstByte ??= now;
    this.offsets.push(Math.max(0, Math.round((now - this.start) * 1000)));
    this.arrivals.push(now);
    this.contentBytes.push(bytes);
    this.tokens.push(tokens ?? (bytes ? Math.max(1, Math.round(bytes / 4)) : 0));
    this.wireBytes.push(wireBytes);
    this.renderUs.push(0);
    this.paintUs.push(0);
    return this.offsets.length - 1;
  }

  /** The app finished rendering what it was last handed (the fetch wrapper calls this when the app reads again):
   * its work is shared among those chunks, and the next frame is the one that shows them. */
  rendered() {
    const delivered = this.delivery.filter((i) => this.contentBytes[i] > 0);
    this.delivery = [];
    if (!delivered.length) return;
    const now = performance.now();
    const arrived = this.arrivals[delivered[0]];
    for (const i of delivered) this.renderUs[i] = Math.round(((now - arrived) * 1000) / delivered.length);
    this.paintsPending += 1;
    afterNextPaint((painted) => {
      for (const i of delivered) this.paintUs[i] = Math.max(1, Math.round((painted - arrived) * 1000));
      this.paintsPending -= 1;
      if (this.ended && !this.paintsPending) this.send();
    });
  }

  /** How the stream ended: "completed", "cancelled" (the user stopped it) or "error" (with the error). */
  end(outcome = "completed", error = null) {
    if (this.ended) return;
    this.rendered();
    this.ended = true;
    this.outcome = outcome;
    this.error = error;
    this.end_ = performance.now();
    if (!this.sampled) return;
    // sent from a later task in any case: the long task that ends now (one that read the last chunks late) is
    // reported only once it is over
    setTimeout(() => this.send(), this.paintsPending ? PAINT_WAIT_MS : 0);
  }

  watchFrames() {
    let last = null;
    const frame = (now) => {
      if (last !== null && document.visibilityState === "visible") {
        const missed = Math.round((now - last) / FRAME_MS) - 1;
        if (missed > 0) this.framesDropped += missed;
      }
      last = now;
      if (!this.ended) requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
  }

  send() {
    if (this.sent) return;
    this.sent = true;
    this.scope.exporter.add(this.span());
  }

  span() {
    const o = this.options;
    const model = o.model || "";
    const operation = o.operation || "chat";
    const firstContent = this.contentBytes.findIndex((b) => b > 0);
    const attributes = [
      attribute("streamscope.side", "browser"),
      attribute("streamscope.encoding", "packed"),
      attribute("streamscope.transport", o.transport || "sse"),
      attribute("streamscope.outcome", this.outcome),
      attribute("gen_ai.operation.name", operation),
      attribute("gen_ai.provider.name", o.provider || this.scope.provider),
      attribute("gen_ai.request.model", model),
      attribute("gen_ai.request.stream", true),
      attribute("streamscope.tokens_estimated", true),
      attribute("streamscope.browser.frames_dropped", this.framesDropped),
      int64Attribute("streamscope.chunks.offset_us", this.offsets),
      int64Attribute("streamscope.chunks.tokens", this.tokens),
      int64Attribute("streamscope.chunks.content_bytes", this.contentBytes),
      int64Attribute("streamscope.chunks.wire_bytes", this.wireBytes),
      int64Attribute("streamscope.chunks.render_us", this.renderUs),
      int64Attribute("streamscope.chunks.paint_delay_us", this.paintUs),
    ];
    if (this.longTasks) {
      // Computed here, at the span's end, not as each chunk arrives: a long task is reported only once it is
      // over, and the one that held a chunk back may still be running when the chunk is read (the app's work
      // on one read runs on into the next when the bytes were already there). By now every task that
      // overlapped the stream has ended; and the chunk path stays as cheap as before.
      attributes.push(attribute("streamscope.host.watch", "longtask"));
      const hostDelayUs = hostDelays(this.start, this.arrivals, this.longTasks);
      attributes.push(int64Attribute("streamscope.chunks.host_delay_us", hostDelayUs));
    }
    if (this.json && this.json.startedAt !== null) attributes.push(...this.jsonAttributes());
    if (this.retracted.size) {
      const bytes = this.offsets.map((_, i) => (this.retracted.get(i) || [0, 0])[0]);
      const tokens = this.offsets.map((_, i) => (this.retracted.get(i) || [0, 0])[1]);
      attributes.push(int64Attribute("streamscope.chunks.retracted_bytes", bytes));
      attributes.push(int64Attribute("streamscope.chunks.retracted_tokens", tokens));
    }
    if (this.responseId) attributes.push(attribute("gen_ai.response.id", this.responseId));
    if (this.responseModel) attributes.push(attribute("gen_ai.response.model", this.responseModel));
    if (this.firstByte !== null) {
      attributes.push(attribute("streamscope.first_byte_offset_us", Math.round((this.firstByte - this.start) * 1000)));
    }
    if (firstContent >= 0) {
      const seconds = this.offsets[firstContent] / 1e6;
      attributes.push({ key: "gen_ai.response.time_to_first_chunk", value: { doubleValue: seconds } });
    }
    if (o.url) {
      const url = new URL(o.url, location.href);
      attributes.push(attribute("server.address", url.hostname));
      attributes.push(attribute("server.port", Number(url.port) || (url.protocol === "https:" ? 443 : 80)));
    }
    if (this.outcome === "cancelled" || this.outcome === "disconnected") {
      attributes.push(attribute("streamscope.cancel_offset_us", Math.round((this.end_ - this.start) * 1000)));
    }
    if (this.error) attributes.push(attribute("error.type", this.error.name || "error"));
    return {
      traceId: this.traceId,
      spanId: this.spanId,
      name: `${operation} ${model}`.trim(),
      kind: 3, // CLIENT
      startTimeUnixNano: unixNanos(this.start),
      endTimeUnixNano: unixNanos(this.end_),
      attributes,
      status: this.error ? { code: 2, message: String(this.error.message || this.error) } : {},
    };
  }

  /** What the page can show while it streams: time to first content, gaps between what reached the screen
   * (painted, where measured), paint and render (ms). */
  stats() {
    const content = this.offsets.map((offset, i) => [offset, i]).filter(([, i]) => this.contentBytes[i] > 0);
    let shown = 0;
    const screen = content.map(([offset, i]) => (shown = Math.max(shown, offset + this.paintUs[i])));
    const gaps = screen.slice(1).map((t, k) => (t - screen[k]) / 1000);
    const paints = content.map(([, i]) => this.paintUs[i] / 1000).filter((ms) => ms > 0);
    const renders = content.map(([, i]) => this.renderUs[i] / 1000);
    return {
      traceId: this.traceId,
      sampled: this.sampled,
      outcome: this.ended ? this.outcome : "streaming",
      chunks: content.length,
      ttftMs: content.length ? content[0][0] / 1000 : null,
      gapP50Ms: quantile(gaps, 0.5),
      gapMaxMs: gaps.length ? Math.max(...gaps) : null,
      paintP50Ms: quantile(paints, 0.5),
      paintP95Ms: quantile(paints, 0.95),
      renderP50Ms: quantile(renders, 0.5),
      framesDropped: this.framesDropped,
    };
  }

  /** Wraps a fetch response so the app reads it unchanged while each chunk is timed. */
  wrap(response) {
    const stream = this;
    const sse = (response.headers.get("content-type") || "").includes("text/event-stream");
    const splitter = sse ? new EventSplitter() : null;
    const decoder = sse ? null : new TextDecoder();
    const reader = response.body.getReader();
    const body = new ReadableStream(
      {
        async pull(controller) {
          stream.rendered(); // the app asks for more: it has done its work on the last chunk
          let read;
          try {
            read = await reader.read();
          } catch (error) {
            stream.end(error.name === "AbortError" ? "cancelled" : "error", error.name === "AbortError" ? null : error);
            controller.error(error);
            return;
          }
          if (read.done) {
            stream.end("completed");
            controller.close();
            return;
          }
          stream.receive(read.value, splitter, decoder);
          controller.enqueue(read.value);
        },
        cancel(reason) {
          stream.end("cancelled");
          return reader.cancel(reason);
        },
      },
      { highWaterMark: 0 },
    );
    const wrapped = new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
    Object.defineProperty(wrapped, "url", { value: response.url });
    wrapped.streamscope = this;
    return wrapped;
  }

  /** One read of the body reached the page: each server-sent event in it is a chunk (raw text: the read is). */
  receive(bytes, splitter, decoder) {
    if (!this.sampled) return;
    this.rendered();
    const now = performance.now();
    if (!splitter) {
      this.delivery = [this.record(now, decoder.decode(bytes, { stream: true }), undefined, bytes.length)];
      return;
    }
    this.firstByte ??= now;
    this.delivery = [];
    for (const { data, wireBytes } of splitter.push(bytes)) {
      let event = null;
      try {
        event = data && data !== "[DONE]" ? JSON.parse(data) : null;
      } catch {
        event = null;
      }
      if (event) {
        this.responseId ||= typeof event.id === "string" ? event.id : "";
        this.responseModel ||= typeof event.model === "string" ? event.model : "";
      }
      this.delivery.push(this.record(now, contentOf(event), undefined, wireBytes));
      const withdrawn = retractionOf(event);
      if (withdrawn) this.retract(withdrawn.bytes, withdrawn.tokens);
      this.followJson(event);
    }
  }
}

/** Finished spans, batched to the collector: by size, by time, and all at once when the page is hidden. */
class Exporter {
  constructor(scope) {
    this.scope = scope;
    this.spans = [];
    this.timer = null;
    addEventListener("visibilitychange", () => document.visibilityState === "hidden" && this.flush(true));
    addEventListener("pagehide", () => this.flush(true));
  }

  add(span) {
    this.spans.push(span);
    if (this.spans.length >= this.scope.maxBatch) this.flush(false);
    else this.timer ??= setTimeout(() => this.flush(false), this.scope.flushIntervalMs);
  }

  body(spans) {
    const s = this.scope;
    const resource = [
      attribute("service.name", s.service),
      attribute("service.instance.id", s.instanceId),
      attribute("telemetry.sdk.name", "streamscope-browser"),
      attribute("telemetry.sdk.language", "webjs"),
      attribute("telemetry.sdk.version", VERSION),
      attribute("user_agent.original", navigator.userAgent),
    ];
    const scope = { name: "streamscope.browser", version: VERSION };
    return JSON.stringify({ resourceSpans: [{ resource: { attributes: resource }, scopeSpans: [{ scope, spans }] }] });
  }

  /** Sends what is queued; ``leaving``: the page may be gone before a fetch answers, so a beacon carries it. */
  flush(leaving) {
    clearTimeout(this.timer);
    this.timer = null;
    if (!this.spans.length) return Promise.resolve();
    const body = this.body(this.spans.splice(0));
    const url = this.scope.url;
    if (leaving && navigator.sendBeacon && navigator.sendBeacon(url, new Blob([body], { type: "text/plain" }))) {
      return Promise.resolve();
    }
    return this.post(url, body).catch(() => {}); // telemetry never breaks the page
  }

  async post(url, body) {
    const headers = { "content-type": "application/json" };
    let payload = body;
    if (typeof CompressionStream === "function") {
      const gzipped = new Blob([body]).stream().pipeThrough(new CompressionStream("gzip"));
      payload = await new Response(gzipped).arrayBuffer();
      headers["content-encoding"] = "gzip";
    }
    return fetch(url, { method: "POST", headers, body: payload, keepalive: payload.byteLength < 60000 });
  }
}

class Scope {
  constructor(options = {}) {
    const endpoint = (options.endpoint || "").replace(/\/$/, "");
    this.url = `${endpoint}/v1/browser/traces${options.token ? `?token=${encodeURIComponent(options.token)}` : ""}`;
    this.service = options.service || "browser";
    this.provider = options.provider || "openai";
    this.sampleRate = options.sampleRate ?? 1;
    this.maxBatch = options.maxBatch || 20;
    this.flushIntervalMs = options.flushIntervalMs ?? 2000;
    this.instanceId = hex(8);
    this.exporter = new Exporter(this);
  }

  /** A stream the app feeds itself (see Stream.chunk, rendered, end, headers). */
  stream(options = {}) {
    return new Stream(this, options);
  }

  /** One response on an open WebSocket, timed from now (call it before sending the request): each message a chunk,
   * read by ``options.format`` ("openai-realtime", the default, or a function from a message's data to
   * { text, done, error }). It ends when the format says done, when the socket closes (completed if the format is a
   * function and the close was clean, else disconnected), or when the app calls stream.end("cancelled"). A socket
   * carries no trace context after its handshake: the server's side is not joined to this one. */
  websocket(socket, options = {}) {
    const { format, ...rest } = options;
    const read = typeof format === "function" ? format : realtimeOf;
    const stream = this.stream({ transport: "websocket", ...rest });
    const settle = () => stream.rendered(); // after the message's listeners ran: the app's work on it is done
    const onMessage = (message) => {
      if (stream.ended) return detach();
      stream.rendered();
      const now = performance.now();
      const data = message.data;
      const wireBytes = typeof data === "string" ? encoder.encode(data).length : data.byteLength ?? data.size ?? 0;
      let carried = { text: "", done: false };
      try {
        carried = read(data) || carried;
      } catch {
        carried = { text: "", done: false }; // a message the format cannot read: kept as bytes, without content
      }
      if (stream.sampled) stream.delivery = [stream.record(now, carried.text || "", carried.tokens, wireBytes)];
      setTimeout(settle, 0);
      if (carried.done) stream.end(carried.error ? "error" : "completed", carried.error || null);
    };
    const onClose = (event) => {
      const clean = typeof format === "function" && event.wasClean;
      stream.end(clean ? "completed" : "disconnected", clean ? null : { name: `close_${event.code}` });
    };
    const detach = () => {
      socket.removeEventListener("message", onMessage);
      socket.removeEventListener("close", onClose);
    };
    socket.addEventListener("message", onMessage);
    socket.addEventListener("close", onClose);
    const end = stream.end.bind(stream);
    stream.end = (...args) => { // however it ends, the socket's listeners go
      detach();
      end(...args);
    };
    return stream;
  }

  /** fetch() with the stream timed: traceparent on the request, the response body wrapped. */
  async fetch(input, init = {}, options = {}) {
    const url = typeof input === "string" ? input : input.url;
    const json = jsonAnswerRequested(init.body) ? "content" : undefined;
    const stream = this.stream({ url, json, ...options });
    const headers = new Headers(init.headers || (typeof input === "string" ? undefined : input.headers));
    headers.set("traceparent", stream.headers().traceparent);
    let response;
    try {
      response = await fetch(input, { ...init, headers });
    } catch (error) {
      stream.end(error.name === "AbortError" ? "cancelled" : "error", error.name === "AbortError" ? null : error);
      throw error;
    }
    if (!response.ok || !response.body) {
      stream.end("error", { name: `http_${response.status}`, message: response.statusText });
      return response;
    }
    return stream.wrap(response);
  }

  /** Sends every finished span now (for tests and single-page apps that navigate away by hand). */
  flush() {
    return this.exporter.flush(false);
  }
}

export function init(options) {
  return new Scope(options);
}

export default { init, contentOf, realtimeOf, JsonProgress };
if (typeof window !== "undefined") window.streamscope = { init, contentOf, realtimeOf, JsonProgress };
