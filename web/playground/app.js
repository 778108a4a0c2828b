// The playground: chat with streaming, a tier switch, a race of two tiers on one prompt, live
// speed figures and the server's status. State that should survive a reload (history, settings)
// is in localStorage; the API key only in sessionStorage.
import { costOf, fetchStatus, streamChat } from './api.js';
import { LiveStats, drawChart, formatStats } from './meter.js';

const $ = (id) => document.getElementById(id);
const KEY = 'uf.key';
const HISTORY = 'uf.history';
const SETTINGS = 'uf.settings';

let model = null;     // the id /health reports; requests must name it
let prices = null;    // USD per million tokens by tier (/health)
let running = [];     // AbortControllers of the responses streaming now
let history = JSON.parse(localStorage.getItem(HISTORY) || '[]');

function settings() {
  return {
    mode: $('mode').value, tier: $('tier').value, system: $('system').value,
    temperature: Number($('temperature').value), top_p: Number($('top-p').value),
    max_tokens: Number($('max-tokens').value),
  };
}

function restoreSettings() {
  const s = JSON.parse(localStorage.getItem(SETTINGS) || '{}');
  if (s.mode) $('mode').value = s.mode;
  if (s.tier) $('tier').value = s.tier;
  if (s.system !== undefined) $('system').value = s.system;
  if (s.temperature !== undefined) $('temperature').value = s.temperature;
  if (s.top_p !== undefined) $('top-p').value = s.top_p;
  if (s.max_tokens) $('max-tokens').value = s.max_tokens;
  $('api-key').value = sessionStorage.getItem(KEY) || '';
}

function saveSettings() {
  localStorage.setItem(SETTINGS, JSON.stringify(settings()));
  $('temperature-v').textContent = Number($('temperature').value).toFixed(2);
  $('top-p-v').textContent = Number($('top-p').value).toFixed(2);
  const race = $('mode').value === 'race';
  $('chat-view').hidden = race;
  $('race-view').hidden = !race;
  $('tier-label').hidden = race;
}

function requestBody(messages, tier) {
  const s = settings();
  const all = s.system.trim() ? [{ role: 'system', content: s.system }, ...messages] : messages;
  return {
    model, messages: all, service_tier: tier,
    temperature: s.temperature, top_p: s.top_p, max_tokens: s.max_tokens,
  };
}

// A reasoning model's thinking, in a block above its answer that the reader can open and close.
// Returns the <details>; its last child holds the text.
function thinkingBlock(reply, text, open) {
  const details = document.createElement('details');
  details.className = 'thinking';
  details.open = open;
  const summary = document.createElement('summary');
  summary.textContent = 'Thinking';
  const body = document.createElement('div');
  body.className = 'thinking-text';
  body.textContent = text;
  details.append(summary, body);
  reply.before(details);
  return details;
}

// Streams one response into a pane (thinking, reply text, stats line, chart). Resolves to the
// reply text, its reasoning and its figures, or to an error already shown in the pane.
async function runInto(pane, messages, tier) {
  const reply = pane.querySelector('.reply');
  const statsEl = pane.querySelector('.stats');
  const chart = pane.querySelector('.chart');
  reply.textContent = '';
  reply.classList.remove('error');
  pane.querySelector('.thinking')?.remove();  // a race pane's previous response
  let thinking = null;  // made when the first reasoning arrives
  let thoughts = '';
  const stats = new LiveStats();
  const controller = new AbortController();
  running.push(controller);
  let servedTier = null;
  formatStats(statsEl, stats, { tier: null });
  let frame = 0;
  let text = '';
  const result = await streamChat({
    body: requestBody(messages, tier),
    key: sessionStorage.getItem(KEY) || '',
    signal: controller.signal,
    onTokens: (piece, n, chunk, reasoning) => {
      stats.add(n);
      servedTier = chunk.service_tier ?? servedTier;
      if (reasoning) {
        thoughts += reasoning;
        // Open while the model thinks, so the reasoning can be read as it streams.
        thinking ??= thinkingBlock(reply, '', !text);
        thinking.lastChild.textContent = thoughts;
      }
      if (piece) {
        // The answer starts: fold the thinking away, once (a reader may open it again).
        if (thinking && !text) thinking.open = false;
        text += piece;
        reply.textContent = text;
      }
      // Redraw at most once a frame: a fast stream sends hundreds of chunks a second.
      if (!frame) {
        frame = requestAnimationFrame(() => {
          frame = 0;
          formatStats(statsEl, stats, { tier: servedTier });
          drawChart(chart, stats.samples);
          pane.scrollIntoView?.({ block: 'end' });
        });
      }
    },
  });
  if (frame) cancelAnimationFrame(frame);
  running = running.filter((c) => c !== controller);
  const tierShown = result.tier ?? servedTier;
  const cost = costOf(result.usage, tierShown, prices);
  formatStats(statsEl, stats, {
    tier: tierShown, usage: result.usage, cost, done: !result.error, stopped: result.stopped,
  });
  drawChart(chart, stats.samples);
  if (result.error) {
    const err = document.createElement('div');
    err.className = 'error';
    err.textContent = result.error;
    reply.append(err);
    if (result.status === 401) $('api-key').focus();
  }
  return {
    text, reasoning: thoughts, error: result.error,
    stats: { ttft: stats.ttft, tps: stats.tps, tokens: result.usage?.completion_tokens ?? stats.tokens, tier: tierShown, cost },
  };
}

function messagePane(role, text = '', reasoning = '') {
  const div = document.createElement('div');
  div.className = `msg ${role}`;
  if (role === 'assistant') {
    div.innerHTML = '<div class="reply"></div><div class="stats"></div><canvas class="chart" width="360" height="70"></canvas>';
    div.querySelector('.reply').textContent = text;
    if (reasoning) thinkingBlock(div.querySelector('.reply'), reasoning, false);
  } else {
    div.textContent = text;
  }
  $('messages').append(div);
  return div;
}

function renderHistory() {
  $('messages').innerHTML = '';
  for (const m of history) {
    const pane = messagePane(m.role, m.content, m.reasoning);
    if (m.stats && m.role === 'assistant') {
      const el = pane.querySelector('.stats');
      el.textContent = `TTFT ${m.stats.ttft == null ? '–' : (m.stats.ttft * 1000).toFixed(0) + ' ms'} · ` +
        `tok/s ${m.stats.tps == null ? '–' : m.stats.tps.toFixed(1)} · tokens ${m.stats.tokens} · ` +
        `tier ${m.stats.tier ?? '–'}` + (m.stats.cost == null ? '' : ` · cost $${m.stats.cost.toFixed(7)}`);
      pane.querySelector('.chart').remove();
    }
  }
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
}

async function send(text) {
  const s = settings();
  setBusy(true);
  try {
    if (s.mode === 'race') {
      // Both requests leave at once; each pane fills as its tier serves it.
      const messages = [{ role: 'user', content: text }];
      const panes = [$('race-a'), $('race-b')];
      await Promise.all(panes.map((p) => runInto(p, messages, p.querySelector('.race-tier').value)));
    } else {
      history.push({ role: 'user', content: text });
      messagePane('user', text);
      const pane = messagePane('assistant');
      const turns = history.map(({ role, content }) => ({ role, content }));
      const r = await runInto(pane, turns, s.tier);
      if (r.error && !r.text) {
        history.pop();  // a failed turn is not kept: resending should not repeat it
      } else {
        // The reasoning is kept to be shown again, not sent back: the next request's turns carry
        // the answers only, as OpenAI's clients send them.
        history.push({ role: 'assistant', content: r.text, reasoning: r.reasoning || undefined, stats: r.stats });
      }
      localStorage.setItem(HISTORY, JSON.stringify(history));
    }
  } finally {
    setBusy(false);
  }
}

async function refreshStatus() {
  try {
    const { health, running: r } = await fetchStatus();
    model = health.model;
    prices = health.prices ?? null;
    $('st-model').textContent = health.model;
    $('st-threads').textContent = health.threads ?? '?';
    $('st-ctx').textContent = health.ctx ?? '?';
    $('st-queued').textContent = health.queued;
    for (const t of ['ultrafast', 'default', 'flex']) $(`st-run-${t}`).textContent = r[t] ?? 0;
    $('st-health').className = `dot ${health.status === 'ok' ? 'ok' : 'bad'}`;
    $('st-health').title = `server ${health.status}`;
  } catch (e) {
    $('st-health').className = 'dot bad';
    $('st-health').title = `server unreachable: ${e.message}`;
  }
}

function init() {
  restoreSettings();
  saveSettings();
  renderHistory();
  for (const id of ['mode', 'tier', 'system', 'temperature', 'top-p', 'max-tokens']) {
    $(id).addEventListener('input', saveSettings);
  }
  $('api-key').addEventListener('input', () => {
    const k = $('api-key').value.trim();
    if (k) sessionStorage.setItem(KEY, k); else sessionStorage.removeItem(KEY);
  });
  $('composer').addEventListener('submit', async (e) => {
    e.preventDefault();
    const text = $('prompt').value.trim();
    if (!text || $('send').disabled) return;
    if (model === null) await refreshStatus();
    $('prompt').value = '';
    await send(text);
  });
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => running.forEach((c) => c.abort()));
  $('clear').addEventListener('click', () => {
    history = [];
    localStorage.removeItem(HISTORY);
    renderHistory();
  });
  refreshStatus();
  setInterval(refreshStatus, 2000);
}

init();
