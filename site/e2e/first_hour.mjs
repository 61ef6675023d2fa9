// The explorer as a new user meets it in the first hour, at 1280 px and on a 375 px
// phone: it opens on a scenario distill trains and never advises what its note contradicts, a
// scenario read from a Hugging Face folder says which folder and where to get it,
// figures in the unit that fits, round ticks, bars that show when the GPU line is far above,
// select labels and buttons that are not cut or touching, results before the form on a phone
// with chart text that reads, and the docs page opened from a file saying what to do. Run by
// e2e.mjs.
import { existsSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ART, BASE, assert, at, check, eq, nativeSweep, stateOf, watch } from './lib.mjs';
import { layoutChecks } from './layout.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

async function open(context, label, url, viewport = { width: 1280, height: 900 }) {
  const page = await context.newPage();
  watch(page, label);
  await page.setViewportSize(viewport);
  await page.goto(`${BASE}${url}`);
  await page.waitForSelector('#explorer [data-k="plan.totals.total"]');
  return page;
}

/** The rendered boxes of the elements matching `selector`. */
const boxes = (page, selector) => page.$$eval(selector, (els) => els.map((e) => {
  const r = e.getBoundingClientRect();
  return { x: r.x, y: r.y, w: r.width, h: r.height, text: e.textContent.trim() };
}));

/** Every check of this file, in pages of `context` (a playwright browser context). */
export async function firstHourChecks(context) {
  await check('the page opens on a scenario distill trains, and its next steps never contradict its note', async () => {
    const page = await open(context, 'opening', 'index.html');
    const form = await stateOf(page);
    eq(form.teacher, 'fashion-mnist-cnn', 'the opening scenario');
    eq(await page.getAttribute('#trainable', 'data-trainable'), 'yes', 'distill trains it');
    assert((await page.textContent('#next-steps')).includes('distill --teacher t.pt --student cfg.toml'), 'how to train it');
    const toml = await page.textContent('#cfg-toml');
    assert(toml.includes('train = "data/fashion-mnist/train.npz"'), `the demo's own files:\n${toml}`);
    // BERT-base's 2-class head is a transformer classifier, which distill does not train yet
    await page.goto(`${BASE}index.html?teacher=bert-base`);
    await page.waitForFunction(() => document.getElementById('trainable')?.dataset.trainable === 'no');
    const next = await page.textContent('#next-steps');
    assert(!next.includes('distill --teacher') && next.includes('distill plan'), `advice under "cannot train": ${next}`);
    await page.close();
  });

  await check('every largest micro-batch shown is at most the training set, and says so', async () => {
    // the opening scenario on an RTX-4090: memory alone allows over 100,000 images, the set holds 60,000
    const page = await open(context, 'cap', 'index.html');
    const native = nativeSweep(await stateOf(page));
    eq(native.train_samples, 60000, 'the opening scenario knows its training set');
    const cells = await page.$$eval('#gpu-table [data-batch], #size-table [data-batch], #levers [data-batch]', (els) => els
      .map((e) => ({ k: e.dataset.k, batch: e.dataset.batch, text: e.textContent.trim() })));
    assert(cells.length >= 16 + 5 + 5, `${cells.length} largest-batch cells`);
    let capped = 0;
    for (const c of cells) {
      const memory = at(native, c.k);
      const want = memory == null ? '' : String(Math.min(memory, 60000));
      eq(c.batch, want, `${c.k} (memory allows ${memory})`);
      assert(memory == null || Number(c.batch) <= 60000, `${c.k}: ${c.batch} is more than the training set`);
      if (memory != null && memory >= 60000) {
        eq(c.text, '60,000 (whole set)', `${c.k}, where memory allows ${memory}`);
        capped++;
      }
    }
    assert(capped >= 10, `only ${capped} cells reach the training set`);
    for (const sel of ['#gpu-table caption', '#levers caption']) {
      assert((await page.textContent(sel)).includes('; at most the training set)'), `${sel} says nothing of the cap`);
    }
    await page.close();
  });

  await check('the opening scenario prices its files as distill plan does: no note says their size is unknown', async () => {
    const page = await open(context, 'data', 'index.html');
    const notes = await page.$$eval('#summary .notes li', (ls) => ls.map((l) => l.textContent));
    assert(!notes.some((n) => n.includes('not known')), `a note contradicts the known 60,000 images: ${notes.join(' / ')}`);
    // the images and labels on the device are a group of their own: (60,000 + 10,000) x (784 + 8) bytes and the
    // allocator's rounding
    const data = Number(await page.getAttribute('#size-bars .bar.chosen rect.g-data', 'data-bytes'));
    assert(data >= 55440000 && data < 55440000 + 8 * 2 ** 20, `data on the device: ${data} bytes`);
    await page.close();
  });

  await check('figures take the unit that fits, and the bars\' ticks are round', async () => {
    // the per-layer table holds the tiny figures (a bias of a few hundred bytes)
    const page = await open(context, 'units', 'index.html');
    await page.click('#toggle-layers');
    await page.waitForSelector('#layer-table');
    // the text each figure shows (an SVG shape's <title> is its hover text, not shown)
    const figures = await page.$$eval('#explorer [data-bytes]', (els) => els
      .map((e) => [[...e.childNodes].filter((n) => n.nodeName !== 'title').map((n) => n.textContent).join('').trim(),
        Number(e.dataset.bytes)])
      .filter(([text]) => text !== ''));
    assert(figures.length > 60, `${figures.length} figures`);
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    for (const [text, bytes] of figures) {
      const m = /^(\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB)$/.exec(text);
      assert(m, `"${text}" (${bytes} bytes) is not a figure in one unit`);
      const value = Number(m[1]);
      const unit = units.indexOf(m[2]);
      assert(value === 0 || (value >= 1 && value < 1024), `"${text}": ${value} is not between 1 and 1023 of its unit`);
      const shown = value * 1024 ** unit;
      assert(Math.abs(shown - bytes) <= 0.006 * bytes + 1, `"${text}" is not ${bytes} bytes`);
    }
    assert(figures.some(([t]) => / (B|KiB)$/.test(t)), 'no figure under a MiB on the page');
    const ticks = (await boxes(page, '#size-bars .grid text')).map((t) => t.text);
    assert(ticks.length >= 2, `ticks ${ticks}`);
    const values = ticks.map((t) => Number(/^(\d+(?:\.\d+)?) /.exec(t)?.[1]));
    const step = values[0];
    assert(/^[125]0*$|^0\.0*[125]$/.test(String(step)), `the first tick ${ticks[0]} is not 1, 2 or 5 x 10^k`);
    values.forEach((v, i) => assert(Math.abs(v - step * (i + 1)) < 1e-9, `ticks ${ticks.join(' / ')} are not multiples of ${ticks[0]}`));
    await page.close();
  });

  await check('bars stay visible when the GPU line is far above them, and the line is marked off the top', async () => {
    const page = await open(context, 'far GPU', 'index.html?teacher=fashion-mnist-cnn&gpu=T4');
    const segs = await boxes(page, '#size-bars .bar.chosen rect.seg');
    const height = segs.reduce((n, b) => n + b.h, 0);
    const plot = (await boxes(page, '#size-bars .bar.chosen rect.hit'))[0].h;
    assert(height > 0.3 * plot, `the chosen bar is ${height.toFixed(1)} px of a ${plot.toFixed(1)} px plot`);
    const mark = await page.textContent('#capacity-off-scale');
    assert(mark.includes('T4') && mark.includes('above the scale') && mark.includes('15.00 GiB'), mark);
    // the mark lies inside the chart at both widths (it was cut at the right edge: "above the scal")
    for (const width of [1280, 375]) {
      await page.setViewportSize({ width, height: 900 });
      const [svg] = await boxes(page, '#size-bars svg');
      const [label] = await boxes(page, '#capacity-off-scale text');
      assert(label.x >= svg.x - 0.5 && label.x + label.w <= svg.x + svg.w + 0.5 && label.y >= svg.y - 0.5,
        `at ${width} px the mark (${label.x.toFixed(1)}..${(label.x + label.w).toFixed(1)} px) leaves the chart (${svg.x.toFixed(1)}..${(svg.x + svg.w).toFixed(1)} px)`);
      await page.screenshot({ path: join(ART, `off-scale-${width}.png`), fullPage: true });
    }
    await page.setViewportSize({ width: 1280, height: 900 });
    // a GPU the bars reach: its line is drawn at its height, no mark
    await page.goto(`${BASE}index.html?teacher=gpt2&gpu=T4`);
    await page.waitForSelector('#size-bars line.capacity', { state: 'attached' });
    assert(!(await page.$('#capacity-off-scale')), 'a reachable GPU line is drawn, not marked');
    await page.close();
  });

  await check('at 1280 px select labels are not cut, labels clear their lines, the buttons do not touch', async () => {
    const page = await open(context, '1280', 'index.html?teacher=gpt2&teacher_precision=bf16');
    // every option of every select fits its box (text, padding and the arrow)
    const cut = await page.$$eval('#explorer form select', (sels) => {
      const ctx = document.createElement('canvas').getContext('2d');
      const out = [];
      for (const s of sels) {
        const cs = getComputedStyle(s);
        ctx.font = `${cs.fontSize} ${cs.fontFamily}`;
        const room = s.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight) - 20;
        for (const o of s.options) if (ctx.measureText(o.text).width > room) out.push(`${s.id}: "${o.text}"`);
      }
      return out;
    });
    assert(cut.length === 0, `cut at 1280 px: ${cut.join(', ')}`);
    // the curve's labels sit on a halo: a line crossing them does not cover them
    for (const sel of ['#batch-curve .budget text', '#batch-curve .capacity text', '#batch-curve .max-mark text', '#size-bars .bar .total']) {
      const order = await page.$eval(sel, (e) => getComputedStyle(e).paintOrder);
      assert(order.startsWith('stroke'), `${sel}: paint-order ${order}`);
    }
    // the label's own lines (one, or two stacked where one finds no clear spot), without its
    // <title> (the exact bytes, shown on hover)
    const budget = await page.$$eval('#batch-curve .budget text tspan', (ts) => ts.map((t) => t.textContent).join(' '));
    assert(/^budget \S+ \S+ \(\S+ \S+ kept free\)$/.test(budget), budget);
    const [copy, download] = await Promise.all(['#copy-cfg', '#download-cfg'].map((s) => boxes(page, s).then((b) => b[0])));
    assert(download.x - (copy.x + copy.w) >= 6 || download.y >= copy.y + copy.h, `the buttons touch: ${JSON.stringify([copy, download])}`);
    await page.screenshot({ path: join(ART, 'explorer-1280.png'), fullPage: true });
    await page.close();
  });

  await check('on a 375 px phone the results come first and the charts\' text reads', async () => {
    const phone = await open(context, 'phone 375', 'index.html', { width: 375, height: 812 });
    const [summary] = await boxes(phone, '#summary');
    const [form] = await boxes(phone, '#explorer form.inputs');
    assert(summary.y < form.y, `the summary at ${summary.y} px, the form at ${form.y} px`);
    assert(summary.y < 812, `the first result is below the first screen (${summary.y} px)`);
    for (const sel of ['#size-bars .bar .total', '#size-bars .grid text', '#size-bars .capacity-label', '#batch-curve .tick']) {
      const small = (await boxes(phone, sel)).filter((b) => b.h < 9);
      assert(small.length === 0, `${sel}: text ${small.map((b) => b.h.toFixed(1)).join(', ')} px tall`);
    }
    const wide = await phone.evaluate(() => document.documentElement.scrollWidth);
    assert(wide <= 375, `${wide} px wide at a 375 px viewport`);
    const native = nativeSweep(await stateOf(phone));
    eq(await phone.getAttribute('#max-batch', 'data-batch'), String(Math.min(native.max_batch, 60000)), 'the summary on a phone');
    await phone.screenshot({ path: join(ART, 'explorer-375.png'), fullPage: true });
    await phone.close();
  });

  await check('the Llama and GPT-2 scenarios train from a Hugging Face folder: the note says which folder and where to get it', async () => {
    for (const [key, dir, gated] of [['llama-2-7b', 'Llama-2-7b-hf', true], ['gpt2', 'gpt2', false]]) {
      const page = await open(context, `model folder ${key}`, `index.html?teacher=${key}`);
      const native = nativeSweep(await stateOf(page));
      eq(native.untrainable, null, 'the estimator says distill trains it');
      eq(native.folder.dir, dir, 'the folder the estimator names');
      eq(await page.getAttribute('#trainable', 'data-trainable'), 'yes', 'distill trains it');
      eq(await page.getAttribute('#trainable', 'data-folder'), native.folder.dir, 'the folder the note names');
      const note = await page.textContent('#trainable');
      for (const part of [native.folder.repo, `${native.folder.dir}/`, 'train.txt', 'test.txt']) {
        assert(note.includes(part), `the note lacks ${part}: ${note}`);
      }
      assert(!note.includes('cannot train') && !note.includes('TorchScript'), `the note: ${note}`);
      const next = await page.textContent('#next-steps');
      for (const part of [`hf download ${native.folder.repo} --local-dir ${native.folder.dir}`,
        'distill plan --student cfg.toml', 'distill --student cfg.toml']) {
        assert(next.includes(part), `the next steps lack ${part}: ${next}`);
      }
      eq(next.includes('hf auth login'), gated, `${key}: the login step only for a gated repository`);
      assert(!next.includes('--teacher'), `the folder is the cfg's teacher, no --teacher: ${next}`);
      const toml = await page.textContent('#cfg-toml');
      assert(toml.includes(`hf = "${native.folder.dir}"`) && toml.includes(`tokenizer = "${native.folder.dir}/tokenizer.json"`)
        && !toml.includes('preset ='), `the cfg.toml names the folder, not the preset:\n${toml}`);
      await page.close();
    }
  });

  await check('docs/memory-model.html opened as a file says how to see its widget', async () => {
    const page = await context.newPage();
    await page.goto(pathToFileURL(join(ROOT, 'docs', 'memory-model.html')).href);
    const note = page.locator('#file-note');
    await note.waitFor({ state: 'visible', timeout: 5000 });
    const text = await note.innerText();
    assert(text.includes('site/build') && text.includes('http.server'), text);
    // no link of the page leads to a file the repository lacks (the explorer sits beside the built page only)
    const dead = (await page.$$eval('a[href]', (as) => as.map((a) => a.href)))
      .filter((h) => h.startsWith('file:') && !existsSync(fileURLToPath(h.split('#')[0])));
    assert(dead.length === 0, `dead links from the file: ${dead.join(', ')}`);
    await page.close();
    // served, the note stays hidden and the widget runs
    const served = await context.newPage();
    await served.goto(`${BASE}docs/memory-model.html`);
    await served.locator('#live .total-bytes').waitFor({ timeout: 15000 });
    assert(!(await served.isVisible('#file-note')), 'the file note shows on the served page');
    // served, the link leads to the explorer
    await served.click('#explorer-link');
    await served.waitForSelector('#explorer [data-k="plan.totals.total"]');
    await served.close();
  });

  await layoutChecks(context);
}
