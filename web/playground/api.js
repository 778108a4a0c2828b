// Talks to `ultrafast serve`: a streamed chat completion over Server-Sent Events, and the errors
// a person should be able to read (a 401 or a 429 must never leave a blank pane).

// Streams one chat completion. Calls onTokens(text, nTokens, chunk, reasoning) for every chunk
// that carries output: text is the answer's piece, reasoning the piece of a reasoning model's
// thinking (delta.reasoning_content, which comes before the answer). nTokens is exact: the request asks for logprobs, whose `content` has one entry per
// sampled token (a chunk can hold several: speculative decoding accepts drafts in bulk, and the
// server coalesces tokens that come faster than it writes). Resolves to
// {usage, tier, finishReason, error} where error is a readable string or null.
export async function streamChat({ body, key, signal, onTokens }) {
  const headers = { 'Content-Type': 'application/json' };
  if (key) headers.Authorization = `Bearer ${key}`;
  const request = {
    ...body,
    stream: true,
    stream_options: { include_usage: true },
    logprobs: true,
    top_logprobs: 0,
  };
  let res;
  try {
    res = await fetch('/v1/chat/completions', {
      method: 'POST', headers, body: JSON.stringify(request), signal,
    });
  } catch (e) {
    if (signal?.aborted) return { stopped: true, error: null };
    return { error: `Cannot reach the server: ${e.message}` };
  }
  if (!res.ok) return { error: await describeHttpError(res), status: res.status };

  const out = { usage: null, tier: null, finishReason: null, error: null, stopped: false };
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of event.split('\n')) {
          if (!line.startsWith('data:')) continue;  // ": keep-alive" comments
          const data = line.slice(5).trim();
          if (data === '[DONE]') return out;
          let chunk;
          try { chunk = JSON.parse(data); } catch { continue; }
          if (chunk.error) {
            out.error = `The server stopped the stream: ${chunk.error.message}`;
            continue;
          }
          if (chunk.service_tier) out.tier = chunk.service_tier;
          if (chunk.usage) out.usage = chunk.usage;
          const choice = chunk.choices?.[0];
          if (!choice) continue;
          if (choice.finish_reason) out.finishReason = choice.finish_reason;
          const text = choice.delta?.content ?? '';
          const reasoning = choice.delta?.reasoning_content ?? '';
          const lp = choice.logprobs?.content;
          const n = Array.isArray(lp) ? lp.length : (text || reasoning ? 1 : 0);
          if (n > 0 || text || reasoning) onTokens(text, n, chunk, reasoning);
        }
      }
    }
  } catch (e) {
    if (signal?.aborted) { out.stopped = true; return out; }
    out.error = `The connection broke: ${e.message}`;
  }
  return out;
}

// "401 Unauthorized: Incorrect API key provided. Enter the server's key in the API key field."
export async function describeHttpError(res) {
  let message = '', code = '';
  try {
    const body = await res.json();
    message = body?.error?.message ?? '';
    code = body?.error?.code ?? '';
  } catch { /* not JSON */ }
  const head = `${res.status} ${res.statusText || ''}`.trim();
  if (res.status === 401) {
    return `${head}: ${message || 'an API key is required'} Enter the server's key in the API key field.`;
  }
  if (res.status === 429) {
    const retry = res.headers.get('Retry-After');
    const when = retry ? ` Retry in ${retry} s` : '';
    const what = code ? ` (${code})` : '';
    return `${head}${what}: ${message || 'too many requests'}${when}${when ? ', or pick another tier.' : ''}`;
  }
  return `${head}: ${message || 'the request failed'}`;
}

// Server status for the panel: /health (model, threads, prices) and the per-tier running
// sequences of /metrics.
export async function fetchStatus() {
  const health = await (await fetch('/health')).json();
  const metrics = await (await fetch('/metrics')).text();
  const running = { ultrafast: 0, default: 0, flex: 0 };
  const re = /^ultrafast_tier_running_sequences\{tier="(\w+)"\} (\S+)$/gm;
  for (const m of metrics.matchAll(re)) running[m[1]] = Number(m[2]);
  return { health, running };
}

// USD of a response from its usage at the serving tier's prices (/health "prices", USD per
// million tokens), or null when either is missing.
export function costOf(usage, tier, prices) {
  const p = prices?.[tier];
  if (!usage || !p) return null;
  const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
  return ((usage.prompt_tokens - cached) * p.input + cached * p.cached_input +
          usage.completion_tokens * p.output) / 1e6;
}
