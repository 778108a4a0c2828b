// Live figures of one streamed response: time to first token, decode tok/s while it streams and
// a tok/s-over-time chart. Rates count tokens after the first one over the time since the first
// one arrived, so the wait for the prompt is in TTFT and not in tok/s.
export class LiveStats {
  constructor() {
    this.start = performance.now();
    this.first = null;   // ms when the first token arrived
    this.last = null;
    this.tokens = 0;
    this.afterFirst = 0; // tokens that arrived after the first chunk
    this.samples = [];   // [seconds since first token, tok/s over the last window]
    this.window = [];    // [ms, tokens] of recent chunks
  }
  add(n, now = performance.now()) {
    if (n <= 0) return;
    if (this.first === null) {
      this.first = now;
    } else {
      this.afterFirst += n;
    }
    this.tokens += n;
    this.last = now;
    this.window.push([now, n]);
    // Rate over the last 500 ms: smooth enough to read, short enough to show a stall.
    while (this.window.length > 2 && now - this.window[0][0] > 500) this.window.shift();
    // The first chunks can arrive in one burst (tokens sampled while the reply's headers were on
    // their way): a rate over a few microseconds would be noise, so the chart starts at 50 ms.
    const span = (now - this.window[0][0]) / 1000;
    if (now - this.first >= 50 && span > 0) {
      const n2 = this.window.slice(1).reduce((s, [, k]) => s + k, 0);
      this.samples.push([(now - this.first) / 1000, n2 / span]);
    }
  }
  get ttft() { return this.first === null ? null : (this.first - this.start) / 1000; }
  // Decode tok/s; null until two chunks came.
  get tps() {
    if (this.first === null || this.last === this.first) return null;
    return this.afterFirst / ((this.last - this.first) / 1000);
  }
}

export function formatStats(el, s, { tier, usage, cost, done, stopped }) {
  const f = (v, d) => (v === null || v === undefined ? '–' : v.toFixed(d));
  const tokens = usage?.completion_tokens ?? s.tokens;
  const parts = [
    ['TTFT', s.ttft === null ? '–' : `${f(s.ttft * 1000, 0)} ms`, 'ttft'],
    ['tok/s', f(s.tps, 1), 'tps'],
    ['tokens', String(tokens), 'tokens'],
    ['tier', tier ?? '–', 'tier'],
    ['cost', cost === null || cost === undefined ? '–' : `$${cost.toFixed(7)}`, 'cost'],
  ];
  el.innerHTML = '';
  for (const [label, value, cls] of parts) {
    const span = document.createElement('span');
    span.className = `stat-${cls}${cls === 'tier' && tier ? ` tier-${tier}` : ''}`;
    span.append(`${label} `);
    const b = document.createElement('b');
    b.textContent = value;
    span.append(b);
    el.append(span);
  }
  if (done || stopped) {
    const span = document.createElement('span');
    span.className = 'stat-end';
    span.textContent = stopped ? 'stopped' : 'done';
    el.append(span);
  }
}

// tok/s over the response as a line on a small canvas.
export function drawChart(canvas, samples) {
  const ctx = canvas.getContext('2d');
  const w = canvas.width, h = canvas.height;
  ctx.clearRect(0, 0, w, h);
  ctx.fillStyle = '#0f1115';
  ctx.fillRect(0, 0, w, h);
  if (samples.length < 2) return;
  const tMax = Math.max(samples[samples.length - 1][0], 1e-3);
  const vMax = Math.max(...samples.map(([, v]) => v)) * 1.1 || 1;
  ctx.strokeStyle = '#ff7a1a';
  ctx.lineWidth = 2;
  ctx.beginPath();
  samples.forEach(([t, v], i) => {
    const x = 4 + (t / tMax) * (w - 8);
    const y = h - 14 - (v / vMax) * (h - 22);
    if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
  });
  ctx.stroke();
  ctx.fillStyle = '#9aa3b2';
  ctx.font = '10px system-ui, sans-serif';
  ctx.fillText(`${vMax.toFixed(0)} tok/s`, 4, 10);
  ctx.fillText(`${tMax.toFixed(1)} s`, w - 34, h - 2);
}
