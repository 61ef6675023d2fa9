// The charts' and form's layout as drawn, measured in the browser at 1280 px and on a
// 375 px phone over several scenarios: no line of the micro-batch chart crosses its labels, no
// bar total touches the GPU line, chart text is at least 10 px on screen and inside its chart,
// the micro-batch ticks do not touch, form labels and select options are not cut. Run by
// first_hour.mjs.
import { join } from 'node:path';
import { ART, BASE, assert, check, watch } from './lib.mjs';

/** Scenarios whose lines and labels fall in different places: the opening one on two cards, a
 * transformer that nearly fills its card, one over its card, and a large one on a large card. */
const VIEWS = [
  'teacher=fashion-mnist-cnn&gpu=RTX-4090',
  'teacher=fashion-mnist-cnn&gpu=T4',
  'teacher=gpt2&gpu=RTX-4090',
  'teacher=gpt2&gpu=T4',
  'teacher=all-minilm-l6-v2&gpu=T4',
  'teacher=smollm2-135m&gpu=A100-80GB',
  'teacher=llama-2-7b&gpu=H100-80GB',
];
const WIDTHS = (process.env.WIDTHS || '1280,375').split(',').map(Number);

/** In `page`: every label of the micro-batch chart (text) that a line or the curve crosses, as
 * "label / line" strings; lines are thin segments in screen coordinates. */
const crossings = (page) => page.$eval('#batch-curve svg', (svg) => {
  const m = svg.getScreenCTM();
  const at = (x, y) => ({ x: m.a * x + m.c * y + m.e, y: m.b * x + m.d * y + m.f });
  const segs = [];
  for (const l of svg.querySelectorAll('line')) {
    const g = (k) => l[k].baseVal.value;
    segs.push([at(g('x1'), g('y1')), at(g('x2'), g('y2')), l.parentElement.getAttribute('class') || l.getAttribute('class')]);
  }
  for (const p of svg.querySelectorAll('polyline')) {
    const pts = [...p.points].map((q) => at(q.x, q.y));
    for (let i = 1; i < pts.length; i++) segs.push([pts[i - 1], pts[i], 'curve']);
  }
  const meets = (r, a, b) => {
    // clip the segment to the box's x range, then compare its y range there
    const [l, h] = a.x <= b.x ? [a, b] : [b, a];
    if (h.x < r.left || l.x > r.right) return false;
    const y = (x) => (h.x === l.x ? null : l.y + ((h.y - l.y) * (x - l.x)) / (h.x - l.x));
    const [ya, yb] = h.x === l.x ? [l.y, h.y] : [y(Math.max(r.left, l.x)), y(Math.min(r.right, h.x))];
    return Math.min(ya, yb) <= r.bottom && Math.max(ya, yb) >= r.top;
  };
  const out = [];
  const labels = [...svg.querySelectorAll('.budget text, .capacity text, .max-mark text')];
  for (const t of labels) {
    const r = t.getBoundingClientRect();
    for (const [a, b, what] of segs) if (meets(r, a, b)) out.push(`"${t.textContent}" / ${what}`);
    for (const u of labels) {
      const q = u.getBoundingClientRect();
      if (u !== t && r.left < q.right && q.left < r.right && r.top < q.bottom && q.top < r.bottom) {
        out.push(`"${t.textContent}" / "${u.textContent}"`);
      }
    }
  }
  return out;
});

/** In `page`: each bar total whose box comes within 1 px of the GPU line (2 units thick). */
const totalsOnTheLine = (page) => page.$$eval('#size-bars .bar .total', (ts) => {
  const line = document.querySelector('#size-bars line.capacity');
  if (!line) return [];
  const l = line.getBoundingClientRect();
  const half = line.ownerSVGElement.getScreenCTM().d; // 1 unit on screen: half the stroke
  return ts.map((t) => [t.textContent, t.getBoundingClientRect()])
    .filter(([, r]) => r.top < l.top + half + 1 && r.bottom > l.top - half - 1)
    .map(([text, r]) => `${text} (${r.top.toFixed(1)}..${r.bottom.toFixed(1)} px, line at ${l.top.toFixed(1)} px)`);
});

/** In `page`: the on-screen size (font size times the SVG's scale) of the smallest chart text. */
const smallestChartText = (page) => page.$$eval('#size-bars text, #batch-curve text', (ts) => {
  const sizes = ts.filter((t) => t.getBoundingClientRect().width > 0)
    .map((t) => [parseFloat(getComputedStyle(t).fontSize) * t.ownerSVGElement.getScreenCTM().a, t.textContent]);
  return sizes.reduce((a, b) => (b[0] < a[0] ? b : a), [Infinity, '']);
});

/** In `page`: chart text that runs past its chart's edge (an SVG clips it: "above the scal"). */
const cutChartText = (page) => page.$$eval('#size-bars svg, #batch-curve svg', (svgs) => svgs.flatMap((svg) => {
  const s = svg.getBoundingClientRect();
  return [...svg.querySelectorAll('text')].map((t) => [t, t.getBoundingClientRect()])
    .filter(([, r]) => r.width > 0 && (r.left < s.left - 0.5 || r.right > s.right + 0.5 || r.top < s.top - 0.5 || r.bottom > s.bottom + 0.5))
    .map(([t, r]) => `"${t.textContent}" (${r.left.toFixed(1)}..${r.right.toFixed(1)} px) past its chart (${s.left.toFixed(1)}..${s.right.toFixed(1)} px)`);
}));

/** In `page`: neighbouring micro-batch tick labels less than 2 px apart, and how many are drawn. */
const crowdedTicks = (page) => page.$$eval('#batch-curve .tick', (ts) => {
  const r = ts.map((t) => [t.textContent, t.getBoundingClientRect()]).sort((a, b) => a[1].left - b[1].left);
  const out = [];
  for (let i = 1; i < r.length; i++) {
    if (r[i][1].left - r[i - 1][1].right < 2) out.push(`ticks "${r[i - 1][0]}" and "${r[i][0]}" ${(r[i][1].left - r[i - 1][1].right).toFixed(1)} px apart`);
  }
  return [out, r.length];
});

/** In `page`: form labels cut off (their text wider than their box), and select options wider
 * than their select's room (its width less padding and the arrow's 20 px). */
const cutLabels = (page) => page.$$eval('#explorer form', ([form]) => {
  const out = [];
  for (const l of form.querySelectorAll('label, legend')) {
    if (l.scrollWidth > l.clientWidth + 0.5 && l.clientWidth > 0) out.push(`label "${l.textContent}" ${l.scrollWidth} > ${l.clientWidth} px`);
  }
  const ctx = document.createElement('canvas').getContext('2d');
  for (const s of form.querySelectorAll('select')) {
    const cs = getComputedStyle(s);
    ctx.font = `${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    const room = s.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight) - 20;
    for (const o of s.options) {
      const w = ctx.measureText(o.text).width;
      if (w > room) out.push(`${s.id}: "${o.text}" ${w.toFixed(0)} > ${room.toFixed(0)} px`);
    }
  }
  return out;
});

/** Every check of this file, in a page of `context` (a playwright browser context). */
export async function layoutChecks(context) {
  for (const width of WIDTHS) {
    await check(`at ${width} px in ${VIEWS.length} views: no line crosses a chart label, no total touches the GPU line, chart text >= 10 px, nothing cut, ticks apart`, async () => {
      const page = await context.newPage();
      watch(page, `layout ${width}`);
      await page.setViewportSize({ width, height: 900 });
      const found = [];
      for (const view of VIEWS) {
        await page.goto(`${BASE}index.html?${view}`);
        await page.waitForSelector('#explorer [data-k="plan.totals.total"]');
        await page.waitForSelector('#batch-curve .budget text');
        for (const c of await crossings(page)) found.push(`${view}: ${c}`);
        for (const t of await totalsOnTheLine(page)) found.push(`${view}: total ${t} touches the GPU line`);
        const [size, text] = await smallestChartText(page);
        if (size < 10) found.push(`${view}: chart text "${text}" is ${size.toFixed(1)} px`);
        for (const c of await cutLabels(page)) found.push(`${view}: ${c}`);
        for (const c of await cutChartText(page)) found.push(`${view}: ${c}`);
        const [crowded, ticks] = await crowdedTicks(page);
        for (const c of crowded) found.push(`${view}: ${c}`);
        if (ticks < 3) found.push(`${view}: only ${ticks} micro-batch ticks`);
        if (view.includes('gpt2&gpu=RTX-4090') || view.includes('fashion-mnist-cnn&gpu=RTX-4090')) await page.screenshot({ path: join(ART, `layout-${view.split('&')[0].slice(8)}-${width}.png`), fullPage: true });
      }
      assert(found.length === 0, found.join('\n'));
      await page.close();
    });
  }
}
