// A live line chart (ddplab/dashboard/chart.py), drawn in the browser: the kernel sends each frame's
// new points only ({points: {key: [from, xs, ys]}}), the lines' colours as state ("lines") and the
// whole picture once per cell ("saved"). The SVG it draws is plots.py's: the same axes, ticks and
// polylines, so the page looks as the static picture a finished cell keeps.

const NS = 'http://www.w3.org/2000/svg';

function niceCeiling(value) {            // the smallest of 1, 2, 5 x 10^k at least value
  if (value <= 0) return 1;
  const exp = 10 ** Math.floor(Math.log10(value));
  for (const m of [1, 2, 5, 10]) if (m * exp >= value * (1 - 1e-12)) return m * exp;
  return 10 * exp;
}

function ticks(lo, hi, bins) {           // matplotlib's MaxNLocator steps: 1, 2, 2.5, 5 x 10^k
  const raw = (hi - lo) / bins;
  const exp = 10 ** Math.floor(Math.log10(raw || 1));
  const step = [1, 2, 2.5, 5, 10].map(m => m * exp).find(s => s >= raw * (1 - 1e-9)) || 10 * exp;
  const values = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi * (1 + 1e-9) + 1e-12; v += step) values.push(v);
  return {values, step};
}

function tickLabel(value, step, thousands) {
  let suffix = '';
  if (thousands && value) { value /= 1000; step /= 1000; suffix = 'k'; }
  let decimals = 0;
  while (decimals < 6 && Math.abs(Number(step.toFixed(decimals)) - step) > 1e-9 * step) decimals += 1;
  return value.toFixed(decimals) + suffix;
}

function limits(lines, opts) {
  let xmax = -Infinity, lo = Infinity, hi = -Infinity;
  for (const {x, y} of Object.values(lines)) {
    for (const v of x) xmax = Math.max(xmax, v);
    for (const v of y) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  }
  if (xmax === -Infinity) return [0, opts.min_x, 0, 1];
  if (opts.y_from_zero && lo >= 0) lo = 0;
  else lo = lo < 0 ? -niceCeiling(-lo * 1.1) : lo * 0.9;
  return [0, Math.max(opts.min_x, niceCeiling(xmax * 1.05)), lo, hi > 0 ? niceCeiling(hi * opts.headroom) : 1];
}

function svg(lines, styles, opts, frame) {
  const {width, height} = opts;
  const [bx, by, bw, bh] = [56, 10, width - 68, height - 37];
  const [x0, x1, y0, y1] = limits(lines, opts);
  const sx = bw / (x1 - x0), sy = bh / (y1 - y0);
  const grid = [], marks = [], labels = [];
  for (const [axis, lo, hi, bins] of [['x', x0, x1, 6], ['y', y0, y1, 5]]) {
    const {values, step} = ticks(lo, hi, bins);
    const thousands = Math.max(Math.abs(lo), Math.abs(hi)) >= 10000 && step >= 1000;
    for (const v of values) {
      const text = tickLabel(v, step, thousands);
      if (axis === 'x') {
        const px = (bx + (v - lo) * sx).toFixed(1);
        grid.push(`M${px} ${by}V${by + bh}`);
        marks.push(`M${px} ${by + bh}v3.5`);
        labels.push(`<text x="${px}" y="${by + bh + 14}" text-anchor="middle">${text}</text>`);
      } else {
        const py = by + bh - (v - lo) * sy;
        grid.push(`M${bx} ${py.toFixed(1)}H${bx + bw}`);
        marks.push(`M${bx} ${py.toFixed(1)}h-3.5`);
        labels.push(`<text x="${bx - 6}" y="${(py + 3.5).toFixed(1)}" text-anchor="end">${text}</text>`);
      }
    }
  }
  const polylines = Object.entries(lines).filter(([key, l]) => styles[key] && l.x.length > 1).map(([key, l]) => {
    const points = l.x.map((x, i) => `${(bx + (x - x0) * sx).toFixed(1)},${(by + bh - (l.y[i] - y0) * sy).toFixed(1)}`);
    return `<polyline points="${points.join(' ')}" fill="none" stroke="${styles[key][0]}" `
      + `stroke-width="${styles[key][1]}" stroke-linejoin="round"/>`;
  });
  const clip = `ddplab-clip-${Math.random().toString(36).slice(2)}`;
  return `<svg xmlns="${NS}" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" `
    + `data-frame="${frame}" style="display:block"><rect width="${width}" height="${height}" fill="#fff"/>`
    + `<path d="${grid.join('')}" stroke="#e8e8e8" stroke-width="0.6"/>`
    + `<path d="${marks.join('')}" stroke="#000" stroke-width="0.8"/>`
    + `<rect x="${bx}" y="${by}" width="${bw}" height="${bh}" fill="none" stroke="#000" stroke-width="0.8"/>`
    + `<g font-family="DejaVu Sans, Arial, sans-serif" font-size="10">${labels.join('')}</g>`
    + `<clipPath id="${clip}"><rect x="${bx}" y="${by}" width="${bw}" height="${bh}"/></clipPath>`
    + `<g clip-path="url(#${clip})">${polylines.join('')}</g></svg>`;
}

function render({model, el}) {
  let lines = {}, frame = 0, queued = false;
  const load = () => {
    lines = {};
    for (const [key, [x, y]] of Object.entries(model.get('saved') || {})) lines[key] = {x: x.slice(), y: y.slice()};
  };
  const draw = () => {
    queued = false;
    const opts = {width: model.get('width'), height: model.get('height'), min_x: model.get('min_x'),
                  headroom: model.get('headroom'), y_from_zero: model.get('y_from_zero')};
    frame += 1;
    el.innerHTML = svg(lines, model.get('lines') || {}, opts, frame);
  };
  // one drawing per animation frame, however many messages came (none while the page is hidden)
  const later = () => { if (!queued) { queued = true; requestAnimationFrame(draw); } };
  const onMessage = (msg) => {
    if (msg.reset) lines = {};
    for (const [key, [from, xs, ys]] of Object.entries(msg.points || {})) {
      const line = lines[key] || (lines[key] = {x: [], y: []});
      if (line.x.length < from) { model.send({hello: true}); return; }  // a view that missed points: all again
      line.x.length = from; line.y.length = from;
      for (let i = 0; i < xs.length; i++) { line.x.push(xs[i]); line.y.push(ys[i]); }
    }
    later();
  };
  const onSaved = () => { load(); later(); };
  model.on('msg:custom', onMessage);
  model.on('change:saved', onSaved);
  model.on('change:lines', later);
  load();
  draw();
  model.send({hello: true});  // a view made mid-cell (a reloaded page): the points so far
  return () => {
    model.off('msg:custom', onMessage);
    model.off('change:saved', onSaved);
    model.off('change:lines', later);
  };
}

export default {render};
