// End-to-end tests of the Responses API (the official `openai` client: responses.create,
// responses.stream, responses.parse) and the Anthropic Messages API (the official
// `@anthropic-ai/sdk`: messages.create, messages.stream, countTokens, tools), both pinned in
// package-lock.json, against `ultrafast serve` on a tiny random-weight model. The three APIs run
// one request core, so the same seeded request must give the same text through each of them.
//
// Run: UF_BIN=build/ultrafast node --test tests/e2e/   (tests/e2e/run.sh does this for ctest)
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { startServe } from '../js/serve_process.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const BIN = process.env.UF_BIN || path.join(root, 'build', 'ultrafast');
const MODEL = process.env.UF_MODEL || path.resolve(root, '..', 'shared', 'models', 'tiny-qwen2-256-q8_0.gguf');
const MODEL_ID = 'tiny';

async function startServer(extraArgs = []) {
  return startServe(BIN, ['-m', MODEL, '--model-id', MODEL_ID, '--ctx', '1024', '--max-seqs', '8',
    '-t', '2', ...extraArgs]);
}

async function metric(base, name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = text.match(new RegExp(`^${name} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

const weatherSchema = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } },
  required: ['city', 'unit'],
  additionalProperties: false,
};

describe('one request core: the same tokens through every API', () => {
  let server;
  let openai;
  let anthropic;
  before(async () => {
    server = await startServer();
    openai = new OpenAI({ apiKey: 'unused', baseURL: `${server.base}/v1`, maxRetries: 0 });
    anthropic = new Anthropic({ apiKey: 'unused', baseURL: server.base, maxRetries: 0 });
  });
  after(async () => { assert.equal(await server.stop(), 0, server.stderr()); });

  for (const [label, sampling] of [
    ['greedy', { temperature: 0 }],
    ['temperature 1, seeded', { temperature: 1, seed: 7 }],
  ]) {
    test(label, async () => {
      const extra = { ...sampling, ignore_eos: true };  // seed and ignore_eos: extensions
      const chat = await openai.chat.completions.create({
        model: MODEL_ID, max_tokens: 20, ...extra,
        messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me something' }],
      });
      const resp = await openai.responses.create({
        model: MODEL_ID, max_output_tokens: 20, instructions: 'Be brief.', input: 'Tell me something', ...extra,
      });
      const msg = await anthropic.messages.create({
        model: MODEL_ID, max_tokens: 20, system: 'Be brief.',
        messages: [{ role: 'user', content: 'Tell me something' }], ...extra,
      });
      const text = chat.choices[0].message.content;
      assert.ok(text.length > 0);
      assert.equal(resp.output_text, text);
      assert.equal(msg.content[0].text, text);
      assert.equal(chat.usage.completion_tokens, 20);
      assert.equal(resp.usage.output_tokens, 20);
      assert.equal(msg.usage.output_tokens, 20);
      assert.equal(resp.usage.input_tokens, chat.usage.prompt_tokens);
      assert.equal(msg.usage.input_tokens + msg.usage.cache_read_input_tokens, chat.usage.prompt_tokens);
      // Streamed through the SDKs' stream helpers: the same again.
      const rs = openai.responses.stream({
        model: MODEL_ID, max_output_tokens: 20, instructions: 'Be brief.', input: 'Tell me something', ...extra,
      });
      let deltas = '';
      rs.on('response.output_text.delta', (e) => { deltas += e.delta; });
      const final = await rs.finalResponse();
      assert.equal(deltas, text);
      assert.equal(final.output[0].content[0].text, text);
      const ms = anthropic.messages.stream({
        model: MODEL_ID, max_tokens: 20, system: 'Be brief.',
        messages: [{ role: 'user', content: 'Tell me something' }], ...extra,
      });
      let streamed = '';
      ms.on('text', (t) => { streamed += t; });
      const finalMessage = await ms.finalMessage();
      assert.equal(streamed, text);
      assert.equal(finalMessage.content[0].text, text);
      assert.equal(finalMessage.stop_reason, 'max_tokens');
      assert.equal(finalMessage.usage.output_tokens, 20);
    });
  }
});

describe('Responses API with the openai client', () => {
  let server;
  let client;
  before(async () => {
    server = await startServer();
    client = new OpenAI({ apiKey: 'unused', baseURL: `${server.base}/v1`, maxRetries: 0 });
  });
  after(async () => { assert.equal(await server.stop(), 0, server.stderr()); });

  test('responses.create: the response object', async () => {
    const r = await client.responses.create({
      model: MODEL_ID, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hi' }] }],
      max_output_tokens: 8, temperature: 0, metadata: { run: 'e2e' }, service_tier: 'flex',
      prompt_cache_key: 'k', safety_identifier: 'u1', store: true,
    });
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.ok(['completed', 'incomplete'].includes(r.status));
    assert.equal(r.service_tier, 'flex');
    assert.deepEqual(r.metadata, { run: 'e2e' });
    assert.equal(r.output[0].type, 'message');
    assert.equal(typeof r.output_text, 'string');
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    const again = await client.responses.retrieve(r.id);
    assert.equal(again.output_text, r.output_text);
  });

  test('function tools: a required call, its output with previous_response_id, streamed calls', async () => {
    const tools = [{ type: 'function', name: 'get_weather', parameters: weatherSchema, strict: true }];
    const first = await client.responses.create({
      model: MODEL_ID, input: 'Weather in Paris?', tools, tool_choice: 'required', max_output_tokens: 80, seed: 3,
    });
    const calls = first.output.filter((o) => o.type === 'function_call');
    assert.ok(calls.length >= 1, JSON.stringify(first.output));
    const args = JSON.parse(calls[0].arguments);
    assert.ok(['c', 'f'].includes(args.unit));
    const second = await client.responses.create({
      model: MODEL_ID, previous_response_id: first.id, tools, max_output_tokens: 6, temperature: 0,
      input: calls.map((c) => ({ type: 'function_call_output', call_id: c.call_id, output: '{"temp": 21}' })),
    });
    assert.equal(second.previous_response_id, first.id);
    assert.ok(second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens);
    // Streamed: the SDK assembles the call from its argument deltas.
    const stream = client.responses.stream({
      model: MODEL_ID, input: 'Weather in Rome?', tools, max_output_tokens: 80, seed: 5,
      tool_choice: { type: 'function', name: 'get_weather' },
    });
    let argDeltas = '';
    stream.on('response.function_call_arguments.delta', (e) => { argDeltas += e.delta; });
    const final = await stream.finalResponse();
    const call = final.output.find((o) => o.type === 'function_call');
    assert.equal(call.name, 'get_weather');
    assert.equal(call.arguments, argDeltas);
    assert.deepEqual(Object.keys(JSON.parse(call.arguments)).sort(), ['city', 'unit']);
  });

  test('responses.parse with a zod text format', async () => {
    const Person = z.object({ name: z.string().max(16), age: z.number().int() });
    const r = await client.responses.parse({
      model: MODEL_ID, input: 'Invent a person', max_output_tokens: 80, seed: 2,
      text: { format: zodTextFormat(Person, 'person') },
    });
    assert.equal(typeof r.output_parsed.name, 'string');
    assert.ok(Number.isInteger(r.output_parsed.age));
  });

  test('what is not supported is a 400 naming it', async () => {
    await assert.rejects(client.responses.create({ model: MODEL_ID, input: 'x', tools: [{ type: 'web_search' }] }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools[0].type');
    await assert.rejects(client.responses.create({ model: MODEL_ID, input: 'x', background: true }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'background');
    await assert.rejects(client.responses.create({ model: MODEL_ID, input: 'x', previous_response_id: 'resp_nope' }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id');
  });

  test('a stream the client aborts frees its sequence and counts its tokens', async () => {
    const before = await metric(server.base, 'ultrafast_generation_tokens_total');
    const stream = await client.responses.create({
      model: MODEL_ID, input: 'A long answer', max_output_tokens: 900, ignore_eos: true, stream: true,
    });
    let deltas = 0;
    for await (const event of stream) {
      if (event.type === 'response.output_text.delta' && ++deltas === 5) {
        stream.controller.abort();
        break;
      }
    }
    const deadline = Date.now() + 20000;
    for (;;) {
      const running = await metric(server.base, 'ultrafast_running_sequences');
      const generated = await metric(server.base, 'ultrafast_generation_tokens_total');
      if (running === 0 && generated >= before + 5) break;
      if (Date.now() > deadline) assert.fail(`running ${running}, generated ${generated} (before ${before})`);
      await new Promise((r) => setTimeout(r, 50));
    }
  });
});

describe('Messages API with @anthropic-ai/sdk', () => {
  let server;
  let client;
  before(async () => {
    server = await startServer(['--api-key', 'sk-e2e-anthropic']);
    client = new Anthropic({ apiKey: 'sk-e2e-anthropic', baseURL: server.base, maxRetries: 0 });
  });
  after(async () => { assert.equal(await server.stop(), 0, server.stderr()); });

  test('x-api-key: the right key works, a wrong one is an AuthenticationError', async () => {
    const bad = new Anthropic({ apiKey: 'sk-wrong', baseURL: server.base, maxRetries: 0 });
    await assert.rejects(bad.messages.create({ model: MODEL_ID, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }),
      (e) => e instanceof Anthropic.AuthenticationError && e.status === 401);
    const r = await client.messages.create({ model: MODEL_ID, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] });
    assert.equal(r.type, 'message');
  });

  test('messages.create: stop sequences and count_tokens', async () => {
    const body = { model: MODEL_ID, max_tokens: 16, temperature: 0, messages: [{ role: 'user', content: 'Hello there' }] };
    const r = await client.messages.create(body);
    assert.match(r.id, /^msg_/);
    assert.equal(r.role, 'assistant');
    const text = r.content.map((b) => b.text).join('');
    const count = await client.messages.countTokens({ model: MODEL_ID, messages: body.messages });
    assert.equal(count.input_tokens, r.usage.input_tokens + r.usage.cache_read_input_tokens);
    if (r.stop_reason === 'max_tokens' && text.length > 6) {
      const stop = text.slice(3, 6);
      const s = await client.messages.create({ ...body, stop_sequences: [stop] });
      assert.equal(s.stop_reason, 'stop_sequence');
      assert.equal(s.stop_sequence, stop);
      assert.equal(s.content[0].text, text.slice(0, text.indexOf(stop)));
    }
    await assert.rejects(client.messages.create({ ...body, temperature: 1.5 }),
      (e) => e instanceof Anthropic.BadRequestError && e.error.type === 'error' &&
        e.error.error.type === 'invalid_request_error' && /temperature/.test(e.message));
  });

  test('tools: a forced tool_use, streamed, and its tool_result', async () => {
    const tools = [{ name: 'get_weather', description: 'Weather of a city', input_schema: weatherSchema }];
    const messages = [{ role: 'user', content: 'Weather in Oslo?' }];
    const first = await client.messages.create({
      model: MODEL_ID, max_tokens: 80, seed: 4, tools, tool_choice: { type: 'any' }, messages,
    });
    assert.equal(first.stop_reason, 'tool_use');
    const use = first.content.find((b) => b.type === 'tool_use');
    assert.match(use.id, /^toolu_/);
    assert.ok(['c', 'f'].includes(use.input.unit));
    const stream = client.messages.stream({
      model: MODEL_ID, max_tokens: 80, seed: 4, tools, tool_choice: { type: 'tool', name: 'get_weather' }, messages,
    });
    let partial = '';
    stream.on('inputJson', (delta) => { partial += delta; });
    const final = await stream.finalMessage();
    const streamedUse = final.content.find((b) => b.type === 'tool_use');
    assert.deepEqual(streamedUse.input, JSON.parse(partial));
    assert.equal(final.stop_reason, 'tool_use');
    const answer = await client.messages.create({
      model: MODEL_ID, max_tokens: 6, temperature: 0, tools, tool_choice: { type: 'none' },
      messages: [...messages, { role: 'assistant', content: first.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"temp": 3}' }] }],
    });
    assert.equal(answer.content[0].type, 'text');
    // Its prompt holds the call and its result: longer than the question alone.
    const question = await client.messages.countTokens({ model: MODEL_ID, tools, tool_choice: { type: 'none' }, messages });
    assert.ok(answer.usage.input_tokens + answer.usage.cache_read_input_tokens > question.input_tokens + 10);
  });
});

// A template whose generation prompt opens <think> (DeepSeek-R1's, given with
// --chat-template-file): the random-weight model never closes it, so its whole reply is
// reasoning, which the openai client reads from message.reasoning_content and, streamed, from
// delta.reasoning_content.
describe('reasoning_content with the openai client', () => {
  const TEMPLATE = path.resolve(root, '..', 'shared', 'templates',
    'deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja');
  let server;
  let client;
  before(async () => {
    server = await startServer(['--chat-template-file', TEMPLATE]);
    client = new OpenAI({ apiKey: 'unused', baseURL: `${server.base}/v1`, maxRetries: 0 });
  });
  after(async () => { assert.equal(await server.stop(), 0, server.stderr()); });

  test('streamed and not, apart from content', async () => {
    const request = {
      model: MODEL_ID, max_tokens: 12, temperature: 0, reasoning_effort: 'high',
      messages: [{ role: 'user', content: 'What is 2+2?' }],
    };
    const r = await client.chat.completions.create(request);
    const reasoning = r.choices[0].message.reasoning_content;
    assert.ok(reasoning.length > 0);
    assert.equal(r.choices[0].message.content, '');
    assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 12);
    let streamed = '';
    let content = '';
    for await (const c of await client.chat.completions.create({ ...request, stream: true })) {
      streamed += c.choices[0]?.delta?.reasoning_content ?? '';
      content += c.choices[0]?.delta?.content ?? '';
    }
    assert.equal(streamed, reasoning);
    assert.equal(content, '');
  });
});
