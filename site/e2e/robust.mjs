// The explorer as a demanding or hostile user meets it: links and pastes that must not
// freeze, kill or silently change the page, a phone's width, huge figures, figures that say what
// they mean, a refused clipboard, and the restart after an internal error. Run by e2e.mjs.
import { readFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ART, BASE, assert, check, compareWithNative, eq, nativeSweep, noPanic, pageWidth, stateOf, urlSynced,
  waitForState, watch,
} from './lib.mjs';

/** A new page of `context` at `url` (below BASE, or absolute), watched under `label`, once the
 * explorer shows its total. */
async function openExplorer(context, label, url = 'index.html?teacher=gpt2') {
  const page = await context.newPage();
  watch(page, label);
  await page.goto(url.startsWith('http') ? url : `${BASE}${url}`);
  await page.waitForSelector('#explorer [data-k="plan.totals.total"]');
  return page;
}

/** Every check of this file, in pages of `context` (a playwright browser context). */
export async function robustnessChecks(context) {
  await check('a link never freezes or kills the page, and nothing it holds is dropped silently', async () => {
    const other = await context.newPage();
    watch(other, 'hostile link');
    const cfg = (student) => `[data]\ninput_shape = [64]\nclasses = 100\n[student]\n${student}\n[train]\nbatch_size = 4\n`;
    const giant = cfg('family = "transformer"\n[student.transformer]\nlayers = 1000000000\nd_model = 64\nheads = 4\nvocab = 100\nhead = "lm"');
    const hidden = cfg(`family = "mlp"\nhidden = [${Array(5000).fill(8).join(', ')}]`);
    for (const [url, want] of [
      [`index.html?teacher=custom#cfg=${encodeURIComponent(giant)}`, 'student.transformer.layers (line 7): is 1000000000; must be between 1 and 4096'],
      [`index.html?teacher=custom&cfg=${encodeURIComponent(giant)}`, 'student.transformer.layers (line 7)'],
      [`index.html?teacher=custom#cfg=${encodeURIComponent(hidden)}`, 'student.hidden (line 6): has 5000 entries; at most 1024'],
    ]) {
      const t0 = Date.now();
      await other.goto(`${BASE}${url}`);
      const msg = await other.waitForSelector('#e-cfg', { timeout: 5000 }).then((e) => e.innerText());
      assert(msg.includes(want), `"${msg}" lacks "${want}"`);
      assert(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
    }
    // values no option has are marked at their selects; a huge value is echoed as a short prefix
    await other.goto(`${BASE}index.html?optimizer=lion&prune=random&gpu=${'G'.repeat(20000)}`);
    await other.waitForSelector('#explorer');
    for (const [field, want] of [['optimizer', 'unknown variant `lion`'], ['prune', 'unknown variant `random`'],
      ['gpu', `unknown GPU "${'G'.repeat(24)}..."`]]) {
      const msg = await other.waitForSelector(`#e-${field}`, { timeout: 5000 }).then((e) => e.innerText());
      assert(msg.includes(want) && msg.length < 600, `${field}: "${msg.slice(0, 300)}" (${msg.length} characters)`);
    }
    const wide = await pageWidth(other);
    assert(wide <= 1280, `a long GPU value makes the page ${wide} px wide`);
    await noPanic(other, 'hostile link');
    await other.close();
  });

  await check('a 1 MB pasted cfg.toml: the link keeps it out of the query, says so, and opens', async () => {
    const other = await openExplorer(context, 'big paste');
    const cfg = readFileSync(join(dirname(fileURLToPath(import.meta.url)), '../../examples/fashion-mnist/student.toml'), 'utf8')
      + `\n# ${'padding '.repeat(131072)}\n`;
    await other.click('.paste summary');
    await other.fill('#paste', cfg);
    await other.click('#paste-load');
    await waitForState(other, (s) => s.teacher === 'custom', 'custom form');
    await urlSynced(other);
    const search = await other.evaluate(() => location.search);
    assert(search.length < 2000 && !search.includes('cfg='), `the query has ${search.length} characters`);
    const note = await other.waitForSelector('#cfg-link-note').then((e) => e.innerText());
    assert(/\(1,\d{3} KB; no server sees it\)/.test(note), note);
    const reopened = await openExplorer(context, 'big link', other.url());
    eq(JSON.stringify(await stateOf(reopened)), JSON.stringify(await stateOf(other)), 'form from the 1 MB link');
    eq((await stateOf(reopened)).cfg, cfg, 'the file from the link');
    await reopened.close();
    await other.close();
  });

  await check('the page and the docs page fit a 375 x 812 phone; tables scroll in their own boxes', async () => {
    const phone = await context.newPage();
    watch(phone, 'phone');
    await phone.setViewportSize({ width: 375, height: 812 });
    for (const url of ['index.html?teacher=gpt2&data_parallel=8&zero_stage=3', 'docs/memory-model.html']) {
      await phone.goto(`${BASE}${url}`);
      await phone.waitForSelector(url.startsWith('docs') ? '#live .total-bytes' : '#explorer [data-k="plan.totals.total"]');
      const wide = await pageWidth(phone);
      assert(wide <= 375, `${url}: ${wide} px wide at a 375 px viewport`);
    }
    await phone.goto(`${BASE}index.html`);
    await phone.waitForSelector('#explorer [data-k="plan.totals.total"]');
    await phone.screenshot({ path: join(ART, 'explorer-phone.png'), fullPage: true });
    await phone.close();
  });

  await check('huge figures in TiB/PiB and T, never thousands of GiB', async () => {
    const other = await openExplorer(context, 'huge', 'index.html?teacher=gpt2&width=16&batch=65536');
    const figures = await other.$$eval('#explorer [data-bytes]', (els) => els.map((e) => e.textContent.trim()));
    assert(figures.some((f) => /^\d+\.\d+ (TiB|PiB)$/.test(f)), 'no TiB or PiB figure');
    const bad = figures.find((f) => /^\d{4,}(\.\d+)? GiB$/.test(f));
    assert(bad === undefined, `"${bad}" on the page`);
    const summary = await other.innerText('#explorer .summary');
    assert(!/\d{4,}\.\d+B\b/.test(summary), summary);
    await noPanic(other, 'huge');
    await other.close();
  });

  await check('figures say what they mean: ZeRO like for like, its gathered term, zero gradients, teacher casts', async () => {
    const other = await openExplorer(context, 'figures');
    const native = nativeSweep(await stateOf(other));
    const ddp = native.levers.find((l) => l.lever === 'data_parallel');
    const zero = native.levers.find((l) => l.lever === 'zero_stage');
    eq(zero.versus, '8 GPUs, DDP', 'the ZeRO lever is compared with DDP');
    eq(zero.saves, ddp.total - zero.total, 'ZeRO-3 saves against DDP on the same 8 GPUs');
    assert(zero.saves > 0 && ddp.costs > 0, `DDP costs ${ddp.costs}, ZeRO-3 saves ${zero.saves}`);
    const row = await other.innerText(`#levers tbody tr:nth-child(${native.levers.indexOf(zero) + 1})`);
    assert(row.includes('ZeRO-3 on the same 8 GPUs') && row.includes('vs 8 GPUs, DDP'), row);
    assert((await other.innerText('#no-gradients')).includes('before the backward'), 'zero gradients explained');
    const labels = await other.$$eval('#f-teacher_precision option', (os) => os.map((o) => o.textContent));
    assert(labels.includes('fp16 (weights cast to 16-bit)') && !labels.some((l) => l.includes('autocast')), labels.join());
    assert(!(await other.$('#same-sizes')), 'distinct sizes are not called the same');
    await other.goto(`${BASE}index.html?teacher=gpt2&width=0.01`);
    assert((await other.waitForSelector('#same-sizes').then((e) => e.innerText())).includes('round to the same student'),
      'equal bars at width 0.01 are explained');
    await other.goto(`${BASE}index.html?teacher=gpt2&data_parallel=8&zero_stage=3`);
    await other.waitForSelector('#zero-gather');
    const z = nativeSweep(await stateOf(other));
    eq(await other.getAttribute('#zero-gather [data-k]', 'data-bytes'), String(z.plan.peak.zero_gather), 'gathered bytes');
    await compareWithNative(other, 'ZeRO-3 on 8 GPUs');
    await noPanic(other, 'figures');
    await other.close();
  });

  await check('Copy cfg.toml says so when the clipboard refuses or is missing', async () => {
    const other = await context.newPage();
    watch(other, 'no clipboard');
    await other.goto(`${BASE}index.html?teacher=gpt2`);
    await other.waitForSelector('#copy-cfg');
    await other.evaluate(() => {
      navigator.clipboard.writeText = () => Promise.reject(new DOMException('denied', 'NotAllowedError'));
    });
    await other.click('#copy-cfg');
    await other.waitForFunction(() => document.querySelector('.export .status')?.textContent.includes('refused'), null,
      { timeout: 3000 }).catch(() => { throw new Error('a refused copy was not reported'); });
    await other.reload();
    await other.waitForSelector('#copy-cfg');
    await other.evaluate(() => Object.defineProperty(navigator, 'clipboard', { value: undefined, configurable: true }));
    await other.click('#copy-cfg');
    await other.waitForFunction(() => document.querySelector('.export .status')?.textContent.includes('refused'), null,
      { timeout: 3000 }).catch(() => { throw new Error('a missing clipboard was not reported'); });
    const toml = await other.textContent('#cfg-toml');
    assert(!/^(kernel|pool) =/m.test(toml), `the transformer cfg.toml carries conv keys:\n${toml}`);
    await noPanic(other, 'no clipboard');
    await other.close();
  });

  await check('after an internal error the page starts again from its link, without a reload', async () => {
    const other = await context.newPage();
    const errors = [];
    other.on('pageerror', (e) => errors.push(e.message));
    await other.goto(`${BASE}index.html?batch=6`);
    await other.waitForSelector('#explorer [data-k="plan.totals.total"]');
    await urlSynced(other);
    await other.evaluate(() => { window.notReloaded = true; });
    // a browser call that throws once in the middle of a render (performance.now, read while
    // pricing) unwinds through the app's state and leaves it borrowed: later actions did nothing
    await other.evaluate(() => {
      const real = performance.now;
      performance.now = () => { performance.now = real; throw new Error('injected failure'); };
    });
    await other.fill('#f-batch', '7');
    const report = await other.waitForSelector('#panic', { timeout: 5000 }).then((e) => e.innerText());
    assert(report.includes('started again from the settings in the link'), report);
    await other.waitForSelector('#explorer [data-k="plan.totals.total"]', { timeout: 15000 });
    eq((await stateOf(other)).batch, 6, "the restarted form (the link's)");
    await other.fill('#f-batch', '12');
    await waitForState(other, (s) => s.batch === 12, 'batch 12 after the restart');
    await compareWithNative(other, 'after the restart');
    eq(await other.evaluate(() => window.notReloaded), true, 'the same page (no reload)');
    assert(errors.some((e) => e.includes('injected failure')), `page errors: ${errors.join('; ')}`);
    await other.close();
  });
}
