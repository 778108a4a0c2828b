// The playground page of `ultrafast serve` in a real browser: headless Debian chromium driven by
// puppeteer-core, against a server started here on loopback with a tiny model from
// ../shared/models (random weights: the text is gibberish, the streaming and figures are real).
//
// Run: UF_BIN=build/ultrafast node --test tests/web/   (tests/web/run.sh does this for ctest)
// UF_SCREENSHOTS=1 also writes docs/playground.png and docs/playground-race.png.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';
import { startServe } from '../js/serve_process.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const BIN = process.env.UF_BIN || path.join(root, 'build', 'ultrafast');
const MODEL = process.env.UF_MODEL || path.resolve(root, '..', 'shared', 'models', 'tiny-llama-256-q8_0.gguf');
const CHROMIUM = process.env.UF_CHROMIUM || '/usr/bin/chromium';
const KEY = 'playground-test-key';

// --pace-ms: every engine step sleeps first, so a stream of n steps lasts at least n x 10 ms
// however fast the tiny model is and however loaded the machine: long enough for the chart to
// get points and for a request to find the ultrafast stream taken (nothing here measures speed).
const PACE_MS = 10;

async function startServer() {
  return startServe(BIN, ['-m', MODEL, '--model-id', 'tiny', '--ctx', '4096', '-t', '2',
    '--api-key', KEY, '--ultrafast-capacity', '1', '--pace-ms', String(PACE_MS)]);
}

// Text of the stats line's figure `name` (ttft, tps, tokens, tier, cost) in `sel`.
const stat = (page, sel, name) =>
  page.$eval(`${sel} .stat-${name} b`, (b) => b.textContent);

// Waits until the response in `sel` is over (done, stopped or an error shown).
async function waitDone(page, sel) {
  await page.waitForFunction((s) => {
    const el = document.querySelector(s);
    return el && (el.querySelector('.error') || el.querySelector('.stats .stat-end'));
  }, { timeout: 60000 }, sel);
}

// Sends the prompt, and resolves to the JSON body of the chat request(s) the page made.
async function send(page, text) {
  const bodies = [];
  const onRequest = (r) => {
    if (r.url().endsWith('/v1/chat/completions') && r.method() === 'POST') bodies.push(JSON.parse(r.postData()));
  };
  page.on('request', onRequest);
  await page.$eval('#prompt', (el, t) => { el.value = t; }, text);
  await page.click('#send');
  return { bodies, done: () => page.off('request', onRequest) };
}

describe('the playground in headless chromium', () => {
  let server, browser, page;
  const pageErrors = [];  // uncaught exceptions and console errors of the page
  before(async () => {
    server = await startServer();
    // run.sh has checked that chromium starts; a failure here is a failure.
    browser = await puppeteer.launch({
      executablePath: CHROMIUM, headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
    });
    page = await browser.newPage();
    await page.setViewport({ width: 1200, height: 760 });
    page.on('pageerror', (e) => pageErrors.push(e.message));
    page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(m.text()); });
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('GET / serves the page and its assets with their content types, built in', async () => {
    const index = await fetch(`${server.base}/`);
    assert.equal(index.status, 200);
    assert.match(index.headers.get('content-type'), /^text\/html/);
    assert.match(await index.text(), /<title>ultrafast playground<\/title>/);
    for (const [file, type] of [['app.js', /^text\/javascript/], ['style.css', /^text\/css/]]) {
      const r = await fetch(`${server.base}/assets/${file}`);
      assert.equal(r.status, 200, file);
      assert.match(r.headers.get('content-type'), type);
    }
    const missing = await fetch(`${server.base}/assets/nope.js`);
    assert.equal(missing.status, 404);
    assert.equal((await missing.json()).error.message, 'Invalid URL (GET /assets/nope.js)');
  });

  test('the page loads and the status panel shows the server', async () => {
    await page.goto(`${server.base}/`, { waitUntil: 'networkidle0' });
    await page.waitForFunction(() => document.querySelector('#st-model').textContent === 'tiny');
    assert.equal(await page.$eval('#st-threads', (e) => e.textContent), '2');
    assert.equal(await page.$eval('#st-ctx', (e) => e.textContent), '4096');
    assert.match(await page.$eval('#st-health', (e) => e.className), /\bok\b/);
    assert.deepEqual(pageErrors, []);
  });

  test('a wrong key shows the 401 message, not a blank pane', async () => {
    await page.$eval('#api-key', (el) => { el.value = ''; });
    await page.type('#api-key', 'wrong-key');
    assert.equal(await page.evaluate(() => sessionStorage.getItem('uf.key')), 'wrong-key');
    const sent = await send(page, 'hello');
    await waitDone(page, '.msg.assistant:last-child');
    sent.done();
    const error = await page.$eval('.msg.assistant:last-child .error', (e) => e.textContent);
    assert.match(error, /^401 /);
    assert.match(error, /Incorrect API key provided/);
    assert.match(error, /API key field/);
  });

  test('a prompt streams into the pane with live, positive tok/s', async () => {
    await page.$eval('#api-key', (el) => { el.value = ''; });
    await page.type('#api-key', KEY);
    await page.select('#tier', 'default');
    await page.$eval('#max-tokens', (el) => { el.value = '200'; el.dispatchEvent(new Event('input')); });
    // Greedy from here on: every reply has the same length on every run (sampling could end one
    // at an early end-of-text token, too short for the chart).
    await page.$eval('#temperature', (el) => { el.value = '0'; el.dispatchEvent(new Event('input')); });
    // Every tok/s value the stats line shows while the response streams.
    await page.evaluate(() => {
      window.seenTps = [];
      new MutationObserver(() => {
        const pane = document.querySelector('.msg.assistant:last-child');
        const tps = pane?.querySelector('.stat-tps b')?.textContent;
        const done = pane?.querySelector('.stats .stat-end') != null;
        if (tps && !done) window.seenTps.push(tps);
      }).observe(document.querySelector('#messages'), { subtree: true, childList: true, characterData: true });
    });
    const sent = await send(page, 'Tell me a story');
    await waitDone(page, '.msg.assistant:last-child');
    sent.done();
    const pane = '.msg.assistant:last-child';
    assert.equal(await page.$(`${pane} .error`), null);
    const text = await page.$eval(`${pane} .reply`, (e) => e.textContent);
    assert.ok(text.length > 0, 'the reply is empty');
    const tps = Number(await stat(page, pane, 'tps'));
    assert.ok(tps > 0, `tok/s ${tps}`);
    const ttft = await stat(page, pane, 'ttft');
    assert.match(ttft, /^\d+ ms$/);
    const tokens = Number(await stat(page, pane, 'tokens'));
    assert.ok(tokens >= 20 && tokens <= 200, `tokens ${tokens}`);
    assert.equal(await stat(page, pane, 'tier'), 'default');
    assert.match(await stat(page, pane, 'cost'), /^\$\d+\.\d{7}$/);
    const seen = (await page.evaluate(() => window.seenTps)).filter((v) => v !== '–').map(Number);
    assert.ok(seen.some((v) => v > 0), `no positive tok/s while streaming (saw ${seen})`);
    assert.equal(sent.bodies.length, 1);
    assert.equal(sent.bodies[0].service_tier, 'default');
    assert.equal(sent.bodies[0].stream, true);
    assert.equal(sent.bodies[0].max_tokens, 200);
    assert.equal(sent.bodies[0].temperature, 0);
    // The chart was drawn: some pixels of the line colour.
    const drawn = await page.$eval(`${pane} canvas`, (c) => {
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i] > 200 && d[i + 1] > 90 && d[i + 1] < 150) n++;
      return n;
    });
    assert.ok(drawn > 20, `chart pixels ${drawn}`);
  });

  test('the tier switch changes service_tier in the request and the tier shown', async () => {
    for (const tier of ['ultrafast', 'flex']) {
      await page.select('#tier', tier);
      const sent = await send(page, `Which tier is this? ${tier}`);
      await waitDone(page, '.msg.assistant:last-child');
      sent.done();
      assert.equal(sent.bodies.length, 1);
      assert.equal(sent.bodies[0].service_tier, tier);
      assert.equal(await stat(page, '.msg.assistant:last-child', 'tier'), tier);
    }
    if (process.env.UF_SCREENSHOTS) {
      await page.screenshot({ path: path.join(root, 'docs', 'playground.png') });
    }
  });

  test('chat history survives a reload and goes with the next request', async () => {
    // Three answered turns; the one refused with 401 is not kept.
    await page.reload({ waitUntil: 'networkidle0' });
    assert.equal(await page.evaluate(() => JSON.parse(localStorage.getItem('uf.history')).length), 6);
    assert.equal(await page.$$eval('.msg', (m) => m.length), 6);
    await page.select('#tier', 'default');
    const sent = await send(page, 'And now?');
    await waitDone(page, '.msg.assistant:last-child');
    sent.done();
    // system prompt (none), then 3 earlier turns of two messages each, then this one.
    const roles = sent.bodies[0].messages.map((m) => m.role);
    assert.equal(roles.length, 7);
    assert.equal(roles.at(-1), 'user');
  });

  test('the race view fills both panes at two tiers at once', async () => {
    await page.select('#mode', 'race');
    assert.equal(await page.$eval('#race-view', (e) => e.hidden), false);
    await page.select('#race-a .race-tier', 'ultrafast');
    await page.select('#race-b .race-tier', 'default');
    const sent = await send(page, 'Race!');
    await waitDone(page, '#race-a');
    await waitDone(page, '#race-b');
    sent.done();
    assert.deepEqual(sent.bodies.map((b) => b.service_tier).sort(), ['default', 'ultrafast']);
    for (const [pane, tier] of [['#race-a', 'ultrafast'], ['#race-b', 'default']]) {
      assert.equal(await page.$(`${pane} .error`), null, pane);
      assert.ok((await page.$eval(`${pane} .reply`, (e) => e.textContent)).length > 0, pane);
      assert.equal(await stat(page, pane, 'tier'), tier);
      assert.ok(Number(await stat(page, pane, 'tps')) > 0, pane);
    }
    if (process.env.UF_SCREENSHOTS) {
      await page.screenshot({ path: path.join(root, 'docs', 'playground-race.png') });
    }
  });

  test('a 429 is shown as a readable message in its pane', async () => {
    // The server has one ultrafast stream (--ultrafast-capacity 1). The test takes it with a
    // stream of its own, then races ultrafast against default: the ultrafast request is refused
    // with 429 tier_capacity_exceeded while the stream is held. The held stream cannot end on its
    // own before then (4000 tokens without speculation: 4000 paced steps, at least 40 s); it is
    // aborted as soon as the 429 is shown, so the default pane is served whatever the scheduler
    // does with default work beside an ultrafast stream.
    const holder = new AbortController();
    const held = await fetch(`${server.base}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
      body: JSON.stringify({
        model: 'tiny', messages: [{ role: 'user', content: 'Hold the ultrafast stream' }],
        service_tier: 'ultrafast', max_tokens: 4000, ignore_eos: true, speculation: 'off',
        stream: true,
      }),
      signal: holder.signal,
    });
    assert.equal(held.status, 200, 'the holding stream was admitted');  // it holds the slot now
    let heldEnded = false;
    const drained = (async () => {
      try {
        for (const reader = held.body.getReader(); !(await reader.read()).done;);
      } catch { /* aborted */ }
      heldEnded = true;
    })();
    await page.select('#race-a .race-tier', 'ultrafast');
    await page.select('#race-b .race-tier', 'default');
    await page.$eval('#max-tokens', (el) => { el.value = '40'; el.dispatchEvent(new Event('input')); });
    const sent = await send(page, 'Ultrafast while it is taken');
    await waitDone(page, '#race-a');
    const heldThrough = !heldEnded;
    holder.abort();
    await drained;
    await waitDone(page, '#race-b');
    sent.done();
    assert.ok(heldThrough, 'the holding stream ended before the ultrafast request was answered');
    assert.deepEqual(sent.bodies.map((b) => b.service_tier).sort(), ['default', 'ultrafast']);
    const error = await page.$eval('#race-a .error', (e) => e.textContent);
    assert.match(error, /^429 [^(]*\(tier_capacity_exceeded\): .*ultrafast stream.* Retry in \d+ s, or pick another tier\.$/);
    assert.equal(await page.$('#race-b .error'), null);
    assert.ok((await page.$eval('#race-b .reply', (e) => e.textContent)).length > 0);
    // The 401 and 429 are console errors of the browser's own (failed fetches); nothing else.
    assert.deepEqual(pageErrors.filter((e) => !/status of (401|429)/.test(e)), []);
  });
});

// A stand-in for the server in front of `serve`: every request goes through to it but the chat
// completions, which this test answers itself, writing each chunk when it chooses. So the page's
// state between two chunks can be waited for, which a model's own stream does not allow.
async function scriptedChat(upstream) {
  const streams = [];
  let wake = null;
  const proxy = http.createServer(async (req, res) => {
    if (req.method === 'POST' && req.url === '/v1/chat/completions') {
      let body = '';
      for await (const d of req) body += d;
      res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
      res.flushHeaders();
      streams.push({ body: JSON.parse(body), res });
      wake?.();
      return;
    }
    try {
      const r = await fetch(upstream + req.url, { method: req.method });
      res.writeHead(r.status, { 'Content-Type': r.headers.get('content-type') ?? 'text/plain' });
      res.end(Buffer.from(await r.arrayBuffer()));
    } catch (e) {
      res.writeHead(502).end(String(e));
    }
  });
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  return {
    base: `http://127.0.0.1:${proxy.address().port}`,
    // Resolves to the next chat request: {body, res}.
    async next() {
      while (!streams.length) await new Promise((resolve) => { wake = resolve; });
      return streams.shift();
    },
    close() {
      proxy.closeAllConnections();
      return new Promise((resolve) => proxy.close(resolve));
    },
  };
}

// One chunk of a streamed chat completion as `serve` writes it: delta fields, and one logprobs
// entry per token (the page counts tokens by them).
function chunk(delta, tokens, extra = {}) {
  const content = tokens.map((t) => ({ token: t, logprob: -1, bytes: null, top_logprobs: [] }));
  return `data: ${JSON.stringify({
    id: 'chatcmpl-test', object: 'chat.completion.chunk', model: 'tiny', service_tier: 'default',
    choices: [{ index: 0, delta, logprobs: tokens.length ? { content } : null, finish_reason: null }],
    usage: null, ...extra,
  })}\n\n`;
}

// The thinking block of the last assistant message: its summary, text and whether it is open,
// and the answer's text; null fields when there is no block.
const lastThinking = (page) => page.evaluate(() => {
  const pane = document.querySelector('.msg.assistant:last-child');
  const t = pane?.querySelector('.thinking');
  return {
    summary: t?.querySelector('summary').textContent ?? null,
    text: t?.querySelector('.thinking-text').textContent ?? null,
    open: t ? t.open : null,
    reply: pane?.querySelector('.reply').textContent ?? null,
    tokens: pane?.querySelector('.stat-tokens b')?.textContent ?? null,
    done: pane?.querySelector('.stats .stat-end') != null,
  };
});

// Waits until the last assistant message's state (lastThinking's) matches `want`'s fields.
async function waitThinking(page, want) {
  await page.waitForFunction((w) => {
    const pane = document.querySelector('.msg.assistant:last-child');
    const t = pane?.querySelector('.thinking');
    const now = {
      text: t?.querySelector('.thinking-text').textContent ?? null,
      open: t ? t.open : null,
      reply: pane?.querySelector('.reply').textContent ?? null,
      tokens: pane?.querySelector('.stat-tokens b')?.textContent ?? null,
    };
    return Object.entries(w).every(([k, v]) => now[k] === v);
  }, { timeout: 60000 }, want);
}

// A reasoning model: DeepSeek-R1's template (--chat-template-file) opens <think> in the prompt, so
// the server streams the reply as delta.reasoning_content (the random-weight model never closes
// the block: it is all reasoning, with an empty answer).
describe('the playground shows a reasoning model\'s thinking', () => {
  const TEMPLATE = path.resolve(root, '..', 'shared', 'templates',
    'deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja');
  let server, browser, page;
  const pageErrors = [];
  before(async () => {
    server = await startServe(BIN, ['-m', MODEL, '--model-id', 'tiny', '--ctx', '4096', '-t', '2',
      '--pace-ms', String(PACE_MS), '--chat-template-file', TEMPLATE]);
    browser = await puppeteer.launch({
      executablePath: CHROMIUM, headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
    });
    page = await browser.newPage();
    page.on('pageerror', (e) => pageErrors.push(e.message));
    page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(m.text()); });
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('the reasoning streams into an open Thinking block above an empty answer', async () => {
    await page.goto(`${server.base}/`, { waitUntil: 'networkidle0' });
    await page.waitForFunction(() => document.querySelector('#st-model').textContent === 'tiny');
    await page.select('#tier', 'default');
    await page.$eval('#max-tokens', (el) => { el.value = '24'; el.dispatchEvent(new Event('input')); });
    await page.$eval('#temperature', (el) => { el.value = '0'; el.dispatchEvent(new Event('input')); });
    // Whether the block was seen open with text before the response was over. A mutation's
    // observer runs before the page's code after the stream's last read, so this cannot miss it.
    await page.evaluate(() => {
      window.seenOpenThinking = false;
      new MutationObserver(() => {
        const pane = document.querySelector('.msg.assistant:last-child');
        const t = pane?.querySelector('.thinking');
        if (t?.open && t.querySelector('.thinking-text').textContent &&
            !pane.querySelector('.stats .stat-end')) window.seenOpenThinking = true;
      }).observe(document.querySelector('#messages'),
        { subtree: true, childList: true, characterData: true, attributes: true });
    });
    const sent = await send(page, 'What is 2+2?');
    await waitDone(page, '.msg.assistant:last-child');
    sent.done();
    assert.equal(await page.$('.msg.assistant:last-child .error'), null);
    assert.ok(await page.evaluate(() => window.seenOpenThinking), 'no open Thinking block while streaming');
    const shown = await lastThinking(page);
    assert.equal(shown.summary, 'Thinking');
    assert.equal(shown.reply, '');
    assert.equal(shown.open, true, 'no answer came: the thinking stays open');
    // The same request again, not streamed (greedy: the same reply): the block holds exactly its
    // reasoning_content, and the token counter counts the reasoning's tokens.
    const { stream, stream_options, ...plain } = sent.bodies[0];
    const r = await (await fetch(`${server.base}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(plain),
    })).json();
    assert.ok(r.choices[0].message.reasoning_content.length > 0);
    assert.equal(shown.text, r.choices[0].message.reasoning_content);
    assert.equal(r.usage.completion_tokens_details.reasoning_tokens, r.usage.completion_tokens);
    assert.equal(shown.tokens, String(r.usage.completion_tokens));
    assert.deepEqual(pageErrors, []);
  });

  test('the thinking streams, then folds away once the answer starts, and survives a reload', async () => {
    const chat = await scriptedChat(server.base);
    try {
      await page.goto(`${chat.base}/`, { waitUntil: 'networkidle0' });  // a new origin: no history
      await page.waitForFunction(() => document.querySelector('#st-model').textContent === 'tiny');
      const sent = await send(page, 'What is 2+2?');
      const { res } = await chat.next();
      res.write(chunk({ role: 'assistant', content: '' }, []));
      res.write(chunk({ reasoning_content: 'Two plus two' }, ['Two', ' plus', ' two']));
      await waitThinking(page, { text: 'Two plus two', open: true, reply: '', tokens: '3' });
      res.write(chunk({ reasoning_content: ' is four.' }, [' is', ' four.']));
      await waitThinking(page, { text: 'Two plus two is four.', open: true, reply: '', tokens: '5' });
      res.write(chunk({ content: 'Four.' }, ['Four.']));
      await waitThinking(page, { text: 'Two plus two is four.', open: false, reply: 'Four.', tokens: '6' });
      assert.equal((await lastThinking(page)).done, false, 'the stream is not over yet');
      // Opened again by the reader, it stays open while the answer goes on.
      await page.click('.msg.assistant:last-child .thinking summary');
      await waitThinking(page, { open: true });
      res.write(chunk({ content: ' Yes.' }, [' Yes.']));
      await waitThinking(page, { open: true, reply: 'Four. Yes.', tokens: '7' });
      const usage = { prompt_tokens: 9, completion_tokens: 7, total_tokens: 16,
        completion_tokens_details: { reasoning_tokens: 5 } };
      res.write(`data: ${JSON.stringify({ object: 'chat.completion.chunk', service_tier: 'default',
        choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }] })}\n\n`);
      res.write(`data: ${JSON.stringify({ object: 'chat.completion.chunk', service_tier: 'default', choices: [], usage })}\n\n`);
      res.end('data: [DONE]\n\n');
      await waitDone(page, '.msg.assistant:last-child');
      sent.done();
      assert.equal(await stat(page, '.msg.assistant:last-child', 'tokens'), '7');
      // The turn is kept with its reasoning, shown folded after a reload; the next request sends
      // the answer back without it.
      await page.reload({ waitUntil: 'networkidle0' });
      const again = await lastThinking(page);
      assert.deepEqual([again.text, again.open, again.reply], ['Two plus two is four.', false, 'Four. Yes.']);
      const next = await send(page, 'And 3+3?');
      const second = await chat.next();
      second.res.end('data: [DONE]\n\n');
      await waitDone(page, '.msg.assistant:last-child');
      next.done();
      assert.deepEqual(second.body.messages[1], { role: 'assistant', content: 'Four. Yes.' });
      assert.deepEqual(pageErrors, []);
    } finally {
      await chat.close();
    }
  });
});
