// End-to-end test of the built explorer (site/dist served on 127.0.0.1) in Debian's Chromium,
// driven by playwright-core. Run by scripts/test-web, which sets:
//   BASE_URL      http://127.0.0.1:<port>/ serving site/dist
//   ARTIFACTS     folder for the screenshots, the downloaded cfg.toml and budgets.json
//   EXPLORE_BIN   native estimator-wasm example `explore` (the reference sweep for a form JSON)
//   PLAN_BIN      native estimator-wasm example `plan` (the Plan JSON of a cfg.toml)
//   DISTILL_BIN   target/debug/distill (its `plan` subcommand must price the downloaded cfg.toml as the page does)
// Every check runs; failures are listed at the end and the exit code is 1 if any failed. Helpers
// in lib.mjs; the checks of hostile links, pastes, phones and failures in robust.mjs; a distill run's
// report.html (opened from disk, values read back against metrics.jsonl) in report.mjs.
import { chromium } from 'playwright-core';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { brotliCompressSync, constants as zlib, gzipSync } from 'node:zlib';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ART, BASE, DIST, DISTILL_BIN, EXPLORE_BIN, PLAN_BIN, assert, barTotals, check, compareWithNative, eq, failures,
  nativeSweep, noPanic, passed, problems, stateOf, urlSynced, waitForState, watch,
} from './lib.mjs';
import { robustnessChecks } from './robust.mjs';
import { reportChecks } from './report.mjs';
import { firstHourChecks } from './first_hour.mjs';

const profile = mkdtempSync(join(tmpdir(), 'explorer-e2e-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  acceptDownloads: true,
  viewport: { width: 1280, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const budgets = {};
const page = await context.newPage();
watch(page, 'explorer');

await check('the page loads with figures and no console error', async () => {
  const t0 = Date.now();
  await page.goto(`${BASE}index.html`);
  await page.waitForSelector('#explorer [data-k="plan.totals.total"]', { timeout: 15000 });
  budgets.first_numbers_wall_ms = Date.now() - t0;
  const n = await page.$$eval('#size-bars rect.seg', (e) => e.length);
  assert(n >= 10, `only ${n} bar segments`);
  await noPanic(page, 'load');
  assert(problems.length === 0, problems.join('; '));
});

await check('every figure equals the native estimator (default form)', async () => {
  const { compared } = await compareWithNative(page, 'default');
  budgets.figures_compared = compared;
});

await check('the largest micro-batch marked equals max_batch, at most the training set, and said so', async () => {
  const native = nativeSweep(await stateOf(page));
  assert(native.max_batch != null, 'the default form should fit');
  // the page opens on Fashion-MNIST: 60,000 training images, fewer than the memory allows
  eq(native.train_samples, 60000, 'the opening scenario knows its training set');
  assert(native.max_batch > 60000, `memory allows ${native.max_batch}`);
  eq(await page.getAttribute('#max-batch', 'data-batch'), '60000', 'summary');
  eq((await page.textContent('#max-batch')).trim(), '60,000', 'summary text');
  const said = await page.textContent('#max-batch-data');
  assert(said.includes('the whole training set') && said.includes(native.max_batch.toLocaleString('en-US')), said);
  eq(await page.getAttribute('#batch-curve circle.dot.max', 'data-batch'), String(native.max_batch), 'curve marker');
  const mark = await page.textContent('#batch-curve .max-mark text');
  assert(mark.includes(`memory fits up to micro-batch ${native.max_batch}`), mark);
});

await check('changing the student size changes the bars', async () => {
  const before = await barTotals(page);
  await page.fill('#f-width', '0.5');
  await waitForState(page, (s) => s.width === 0.5, 'width 0.5');
  const after = await barTotals(page);
  assert(after.length === 5 && JSON.stringify(after) !== JSON.stringify(before), `bars unchanged: ${after}`);
  await urlSynced(page);
  assert(page.url().includes('width=0.5'), `URL ${page.url()}`);
  await compareWithNative(page, 'width 0.5');
  await page.click('#size-bars g.bar[data-scale="2"]');
  await waitForState(page, (s) => s.width === 1, 'width 1 after clicking the x2 bar');
  eq(JSON.stringify(await barTotals(page)), JSON.stringify(before), 'bars after returning to width 1');
});

await check('every lever reaches the estimate', async () => {
  // from here on the checks run on GPT-2 small (a transformer: every field, and an evaluation peak)
  await page.goto(`${BASE}index.html?teacher=gpt2`);
  await page.waitForSelector('#explorer [data-k="plan.totals.total"]');
  await page.selectOption('#f-precision', 'fp32');
  await page.selectOption('#f-checkpointing', 'sqrt');
  await page.fill('#f-sparsity', '0.3');
  await page.fill('#f-data_parallel', '4');
  await page.selectOption('#f-zero_stage', '2');
  await page.selectOption('#f-gpu', 'A100-80GB');
  await page.fill('#f-input', '512');
  await page.fill('#f-depth', '2');
  await page.fill('#f-eval_batch', '4096');
  await waitForState(page, (s) => s.depth === 2 && s.gpu === 'A100-80GB' && s.input === 512 && s.eval_batch === 4096,
    'levers set');
  // the evaluation batch is priced: this one is the peak
  assert((await page.innerText('#summary')).includes('The peak is at the evaluation moment'), 'evaluation peak');
  const s = await stateOf(page);
  eq(s.precision, 'fp32', 'precision'); eq(s.checkpointing, 'sqrt', 'checkpointing'); eq(s.sparsity, 0.3, 'sparsity');
  eq(s.data_parallel, 4, 'data parallel'); eq(s.zero_stage, 2, 'ZeRO');
  await page.click('#toggle-layers');
  await page.waitForSelector('#layer-table');
  const { native } = await compareWithNative(page, 'levers + per-layer table');
  const rows = await page.$$eval('#layer-table tbody tr', (r) => r.length);
  eq(rows, native.plan.layers.length, 'per-layer rows');
});

await check('a link reproduces the view', async () => {
  await urlSynced(page);
  const url = page.url();
  const other = await context.newPage();
  watch(other, 'link');
  await other.goto(url);
  await other.waitForSelector('#explorer [data-k="plan.totals.total"]');
  eq(JSON.stringify(await stateOf(other)), JSON.stringify(await stateOf(page)), 'form from the link');
  // the per-layer table is opened on demand, not part of the link
  const figures = async (p) => p.$$eval('#explorer [data-k][data-bytes]', (els) => els
    .filter((e) => !e.dataset.k.startsWith('plan.layers.'))
    .map((e) => `${e.dataset.k}=${e.dataset.bytes}`).join());
  const mine = await figures(page);
  assert(mine.length > 1000, 'figures on the page');
  eq(await figures(other), mine, 'figures from the link');
  await other.close();
});

await check('bad input shows an inline message, never a panic', async () => {
  for (const [field, text, message] of [
    ['batch', '', 'enter a whole number'],
    ['batch', '-4', 'must be positive'],
    ['batch', '99999999999999999999999', 'not a whole number'],
    ['batch', '0', 'between 1 and'],
    ['width', 'abc', 'not a number'],
    ['width', '0', 'between 0.01 and 64'],
    ['width', '1e9', 'between 0.01 and 64'],
    ['width', '1e-300', 'between 0.01 and 64'],
    ['width', '9'.repeat(20000) + 'x', `"${'9'.repeat(24)}..." is not a number`],
    ['batch', '2.5', 'not a whole number from 1 to 1,099,511,627,776'],
    ['input', '1e3', 'not a whole number from 1 to 1,048,576'],
    ['sparsity', '1.5', 'fraction'],
    ['data_parallel', '-1', 'must be positive'],
  ]) {
    await page.fill(`#f-${field}`, text);
    const shown = await page.waitForSelector(`#e-${field}`, { timeout: 3000 }).then((e) => e.innerText());
    assert(shown.includes(message), `${field}="${text.slice(0, 30)}": "${shown.slice(0, 300)}" lacks "${message}"`);
    assert(shown.length < 300, `${field}: a message of ${shown.length} characters`);
    assert(await page.$('#explorer [data-k="plan.totals.total"]'), `${field}="${text}": the figures vanished`);
  }
  // -0 is 0, in the form and in the link
  await page.fill('#f-sparsity', '-0');
  await page.waitForTimeout(300);
  assert(!(await page.getAttribute('#explorer', 'data-query')).includes('sparsity=-0'), 'sparsity=-0 in the link');
  await page.fill('#f-batch', '8'); await page.fill('#f-width', '1'); await page.fill('#f-sparsity', '0');
  await page.fill('#f-data_parallel', '1');
  await page.waitForSelector('#e-batch', { state: 'detached' });
  // an absurd size the estimator rejects: a sequence longer than GPT-2's positions
  await page.fill('#f-input', '1048576');
  const err = await page.waitForSelector('#e-input').then((e) => e.innerText());
  assert(err.includes('1024'), err);
  assert(await page.$('#estimate-error'), 'the views give way to the message');
  await page.fill('#f-input', '1024');
  await page.waitForSelector('#e-input', { state: 'detached' });
  // a micro-batch within its bound whose bytes overflow: said at the micro-batch
  await page.fill('#f-batch', '1099511627776');
  const over = await page.waitForSelector('#e-batch').then((e) => e.innerText());
  assert(over.includes('micro-batch 1099511627776 overflows 64-bit bytes'), over);
  await page.fill('#f-batch', '8');
  await page.waitForSelector('#e-batch', { state: 'detached' });
  await noPanic(page, 'bad input');
});

await check('a link with a bad value keeps the rest and marks that input; names are canonical', async () => {
  const other = await context.newPage();
  watch(other, 'bad link');
  await other.goto(`${BASE}index.html?gpu=h200&batch=-3&precision=fp8&teacher_precision=pure_bf16`);
  await other.waitForSelector('#explorer [data-k="plan.totals.total"]');
  const shown = await other.waitForSelector('#e-batch').then((e) => e.innerText());
  assert(shown.includes('must be positive'), `batch=-3: "${shown}"`);
  eq(await other.inputValue('#f-batch'), '-3', 'the bad text stays in its input');
  const precision = await other.waitForSelector('#e-precision').then((e) => e.innerText());
  assert(precision.includes('unknown variant `fp8`'), `precision=fp8: "${precision}"`);
  const s = await stateOf(other);
  eq(s.gpu, 'H200', 'a GPU by its catalogue name'); eq(await other.inputValue('#f-gpu'), 'H200', 'the GPU shown');
  eq(await other.inputValue('#f-teacher_precision'), 'pure_bf16', 'a value without an option is shown as is');
  // a cfg.toml nested absurdly deep is refused with a message, not a stack overflow
  const deep = `[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = "mlp"\n[train]\nz = ${'['.repeat(6000)}${']'.repeat(6000)}\n`;
  await other.click('.paste summary');
  await other.fill('#paste', deep);
  await other.click('#paste-load');
  const msg = await other.waitForSelector('#e-cfg').then((e) => e.innerText());
  assert(msg.includes('nested more than'), msg);
  await noPanic(other, 'bad link');
  await other.close();
});

await robustnessChecks(context);
await firstHourChecks(context);

/** The demo's Fashion-MNIST files in `dir` (train.npz, test.npz): linked from data/fashion-mnist when
 * scripts/demo made them, else converted from Debian's dataset-fashion-mnist (scripts/setup installs it)
 * by the demo's own script. */
function fashionMnistFiles(dir) {
  const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
  const made = join(ROOT, 'data', 'fashion-mnist');
  mkdirSync(dirname(dir), { recursive: true });
  if (existsSync(join(made, 'train.npz')) && existsSync(join(made, 'test.npz'))) {
    symlinkSync(made, dir);
    return;
  }
  execFileSync(join(ROOT, '.venv', 'bin', 'python'), [join(ROOT, 'examples', 'fashion-mnist', 'prepare_data.py'),
    '/usr/share/datasets/fashion-mnist', dir], { stdio: 'pipe' });
}

let downloaded;
await check('Download cfg.toml gives the file the page prices; distill plan on it, with the demo\'s files, gives the page\'s figures', async () => {
  await page.selectOption('#f-teacher', 'fashion-mnist-cnn');
  await waitForState(page, (s) => s.teacher === 'fashion-mnist-cnn', 'fashion-mnist teacher');
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#download-cfg')]);
  downloaded = join(ART, 'cfg.toml');
  await download.saveAs(downloaded);
  const text = readFileSync(downloaded, 'utf8');
  const form = await stateOf(page);
  const want = execFileSync(EXPLORE_BIN, ['-', '--cfg'], { input: JSON.stringify(form), encoding: 'utf8' });
  eq(text.trim(), want.trim(), 'downloaded cfg.toml vs the native cfg.toml');
  eq(text.trim(), (await page.textContent('#cfg-toml')).trim(), 'downloaded vs shown');
  assert(existsSync(DISTILL_BIN), `${DISTILL_BIN} is missing: build distill (cargo build -p distill) before scripts/test-web`);
  // distill plan on the same file with the demo's files beside it (its [data] paths are relative to
  // it) prices the same bytes as the page: the images on the device and the teacher's cached logits too
  const dir = mkdtempSync(join(tmpdir(), 'explorer-plan-'));
  const cfg = join(dir, 'cfg.toml');
  writeFileSync(cfg, text);
  fashionMnistFiles(join(dir, 'data', 'fashion-mnist'));
  const r = spawnSync(DISTILL_BIN, ['plan', '--student', cfg, '--json'], { encoding: 'utf8' });
  const said = (r.stderr || String(r.error || '')).split('\n').map((l) => l.trim()).filter(Boolean);
  assert(r.status === 0, `${DISTILL_BIN} plan --student ${cfg} exited ${r.status}: ${said.slice(0, 2).join(' / ')}`);
  const planned = JSON.parse(r.stdout);
  eq(JSON.stringify(planned.data.dataset), JSON.stringify({ train_samples: 60000, test_samples: 10000, sample_bytes: 784 }),
    'the files distill plan read');
  eq(String(planned.plan.totals.total), await page.getAttribute('#explorer [data-k="plan.totals.total"]', 'data-bytes'),
    'distill plan of the downloaded file vs the page');
  for (const [i, row] of planned.max_batch.entries()) {
    const want = row.batch == null ? '' : String(Math.min(row.batch, 60000));
    eq(await page.getAttribute(`#gpu-table [data-k="gpus.${i}.max_batch"]`, 'data-batch'), want, `${row.gpu}'s largest micro-batch`);
  }
});

await check('Copy cfg.toml puts the file on the clipboard', async () => {
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  await page.click('#copy-cfg');
  await page.waitForFunction(() => document.querySelector('.export .status')?.textContent === 'copied');
  const clip = await page.evaluate(() => navigator.clipboard.readText());
  eq(clip.trim(), (await page.textContent('#cfg-toml')).trim(), 'clipboard');
});

await check('every scenario says whether distill trains its cfg.toml; MiniLM\'s, SmolLM2\'s and the Llama folders\' train and distill plan accepts MiniLM\'s', async () => {
  const keys = await page.$$eval('#f-teacher option', (os) => os.map((o) => o.value).filter((v) => v !== 'custom'));
  assert(keys.includes('all-minilm-l6-v2'), `no MiniLM scenario among ${keys.join(', ')}`);
  const trained = [];
  for (const key of keys) {
    await page.selectOption('#f-teacher', key);
    // (waitForState's predicate runs in the page and cannot capture `key`)
    await page.waitForFunction((k) => new URLSearchParams(document.getElementById('explorer')?.dataset.query ?? '')
      .get('teacher') === k, key, { timeout: 5000 }).catch(() => { throw new Error(`timed out waiting for ${key}`); });
    const native = nativeSweep(await stateOf(page));
    const want = native.untrainable == null ? 'yes' : 'no';
    await page.waitForFunction((w) => document.getElementById('trainable')?.dataset.trainable === w, want, { timeout: 5000 })
      .catch(() => { throw new Error(`${key}: #trainable is not "${want}"`); });
    const said = (await page.textContent('#trainable')).trim();
    if (native.untrainable != null) {
      assert(said.startsWith(native.untrainable), `${key}: the page says "${said}", the estimator "${native.untrainable}"`);
    } else {
      trained.push(key);
    }
  }
  for (const key of ['fashion-mnist-cnn', 'all-minilm-l6-v2', 'gpt2', 'smollm2-135m', 'llama-2-7b', 'llama-3-8b']) {
    assert(trained.includes(key), `${key} trains: ${trained}`);
  }
  assert(!trained.includes('bert-base'), 'bert-base is not trained by distill yet');
  await page.selectOption('#f-teacher', 'all-minilm-l6-v2');
  await waitForState(page, (s) => s.teacher === 'all-minilm-l6-v2', 'MiniLM teacher');
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#download-cfg')]);
  const file = join(ART, 'minilm-cfg.toml');
  await download.saveAs(file);
  const text = readFileSync(file, 'utf8');
  for (const line of ['tokenizer = "data/minilm/tokenizer.json"', 'head = "embedding"', 'objective = "embedding_mse"',
    'init_from_teacher = [0, 4, 5]', 'epochs = 1']) {
    assert(text.includes(line), `the MiniLM cfg.toml lacks ${line}`);
  }
  const r = spawnSync(DISTILL_BIN, ['plan', '--student', file], { encoding: 'utf8' });
  const said = (r.stderr || String(r.error || '')).split('\n').map((l) => l.trim()).filter(Boolean);
  assert(r.status === 0, `${DISTILL_BIN} plan --student ${file} exited ${r.status}: ${said.slice(0, 2).join(' / ')}`);
});

await check('pasting a cfg.toml fills the form and prices the same file', async () => {
  const cfg = readFileSync(join(dirname(fileURLToPath(import.meta.url)), '../../examples/fashion-mnist/student.toml'), 'utf8')
    + '\n[estimate]\ngpu = "RTX-3090"\n';
  await page.click('.paste summary');
  await page.fill('#paste', cfg);
  await page.click('#paste-load');
  await waitForState(page, (s) => s.teacher === 'custom', 'custom form');
  const s = await stateOf(page);
  eq(s.gpu, 'RTX-3090', 'GPU from the file'); eq(s.batch, 128, 'batch from the file'); eq(s.family, 'cnn', 'family');
  await compareWithNative(page, 'pasted cfg.toml');
  const file = join(ART, 'pasted.toml');
  writeFileSync(file, cfg);
  const plan = JSON.parse(execFileSync(PLAN_BIN, [file], { encoding: 'utf8' }));
  eq(String(plan.totals.total), await page.getAttribute('#explorer [data-k="plan.totals.total"]', 'data-bytes'),
    'the pasted file priced natively');
  await page.fill('#paste', '[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[student]\nfamily = "cnn"\nhiden = 3\n');
  await page.click('#paste-load');
  const msg = await page.waitForSelector('#e-cfg').then((e) => e.innerText());
  assert(msg.includes('unknown field') && msg.includes('line'), msg);
});

await check('no console error, page error or panic on the explorer', async () => {
  await noPanic(page, 'end');
  assert(problems.length === 0, problems.join('; '));
});

await check('screenshots', async () => {
  await page.goto(`${BASE}index.html`);
  await page.waitForSelector('#explorer [data-k="plan.totals.total"]');
  await page.screenshot({ path: join(ART, 'explorer.png'), fullPage: true });
});

await check('budgets: first numbers and sweep recompute', async () => {
  const first = [];
  for (let i = 0; i < 5; i++) {
    const p = await context.newPage();
    watch(p, `load ${i}`);
    await p.goto(`${BASE}index.html`);
    await p.waitForSelector('#explorer[data-first-numbers-ms]');
    first.push(Number(await p.getAttribute('#explorer', 'data-first-numbers-ms')));
    await p.close();
  }
  first.sort((a, b) => a - b);
  budgets.first_numbers_ms = first[2];
  // input change -> DOM updated, measured in the page; the app's own compute time too
  const runs = await page.evaluate(async () => {
    const input = document.getElementById('f-batch');
    const main = document.getElementById('explorer');
    const out = [];
    for (let i = 0; i < 40; i++) {
      const value = i % 2 ? '8' : '6';
      const done = new Promise((resolve) => {
        const obs = new MutationObserver(() => { obs.disconnect(); resolve(performance.now()); });
        obs.observe(main, { attributes: true, attributeFilter: ['data-query'] });
      });
      const t0 = performance.now();
      input.value = value;
      input.dispatchEvent(new Event('input', { bubbles: true }));
      const t1 = await done;
      await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
      out.push({ dom: t1 - t0, sweep: Number(main.dataset.sweepMs) });
    }
    return out;
  });
  const med = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
  const max = (xs) => Math.max(...xs);
  budgets.recompute_dom_ms_median = med(runs.map((r) => r.dom));
  budgets.recompute_dom_ms_max = max(runs.map((r) => r.dom));
  budgets.sweep_ms_median = med(runs.map((r) => r.sweep));
  budgets.sweep_ms_max = max(runs.map((r) => r.sweep));
  const wasm = readdirSync(DIST).filter((f) => f.endsWith('.wasm'));
  eq(wasm.length, 1, 'one app wasm in dist/');
  const gz = (f) => gzipSync(readFileSync(f), { level: 9 }).length;
  budgets.site_wasm_bytes = readFileSync(join(DIST, wasm[0])).length;
  budgets.site_wasm_gzip_bytes = gz(join(DIST, wasm[0]));
  budgets.site_wasm_brotli_bytes = brotliCompressSync(readFileSync(join(DIST, wasm[0])),
    { params: { [zlib.BROTLI_PARAM_QUALITY]: 11 } }).length;
  budgets.site_total_gzip_bytes = readdirSync(DIST).filter((f) => /\.(wasm|js|css|html)$/.test(f))
    .reduce((n, f) => n + gz(join(DIST, f)), 0);
  budgets.embed_wasm_gzip_bytes = gz(join(DIST, 'embed', 'estimator_wasm_bg.wasm'));
  // The page's size budget (site/README.md, "Size"): a size is deterministic, so it is a test.
  eq(budgets.site_wasm_gzip_bytes <= 260_000, true, `site wasm ${budgets.site_wasm_gzip_bytes} bytes gzip <= 260,000`);
  console.log(JSON.stringify(budgets));
});

await check('the embed snippet works on the docs page', async () => {
  const docs = await context.newPage();
  const before = problems.length;
  watch(docs, 'docs');
  await docs.goto(`${BASE}docs/memory-model.html`);
  const total = docs.locator('#snippet-demo .total-bytes');
  await total.waitFor({ timeout: 15000 });
  const form = JSON.parse(await docs.getAttribute('#snippet-demo', 'data-state'));
  eq(form.teacher, 'fashion-mnist-cnn', 'snippet teacher'); eq(form.gpu, 'T4', 'snippet GPU'); eq(form.batch, 256, 'snippet batch');
  const native = nativeSweep(form);
  eq(await total.getAttribute('data-bytes'), String(native.plan.totals.total), 'widget total vs native');
  eq((await docs.locator('#snippet-demo .max-batch').innerText()).trim(), String(native.max_batch), 'widget largest batch');
  const live = docs.locator('#live .total-bytes');
  const was = await live.getAttribute('data-bytes');
  await docs.locator('#live input[name="width"]').fill('2');
  await docs.waitForFunction((w) => document.querySelector('#live .total-bytes')?.dataset.bytes !== w, was);
  const liveForm = JSON.parse(await docs.getAttribute('#live', 'data-state'));
  eq(await live.getAttribute('data-bytes'), String(nativeSweep(liveForm).plan.totals.total), 'live widget after a change');
  await docs.locator('#live input[name="batch"]').fill('-2');
  const err = await docs.locator('#live .error').innerText();
  assert(err.includes('micro-batch'), err);
  // attributes: a GPU by any spelling is shown as priced, bad numbers are said as typed
  await docs.evaluate(() => document.body.insertAdjacentHTML('beforeend',
    '<kd-estimator id="odd" teacher="gpt2" gpu="h200" width="abc" batch="1e30"></kd-estimator>'));
  const odd = docs.locator('#odd');
  await odd.locator('.error').waitFor({ timeout: 5000 });
  eq(await odd.locator('select[name="gpu"]').inputValue(), 'H200', 'the GPU select for gpu="h200"');
  eq(await odd.locator('input[name="width"]').inputValue(), 'abc', 'the width input for width="abc"');
  const said = await odd.locator('.error').innerText();
  assert(said.includes('from 1 to 1,099,511,627,776') && !said.includes('form JSON'), said);
  await docs.evaluate(() => document.getElementById('odd').setAttribute('batch', '8'));
  await docs.waitForFunction(() => document.getElementById('odd').shadowRoot.querySelector('.error')?.textContent
    .includes('width: "abc" is not a number'));
  await docs.evaluate(() => document.getElementById('odd').setAttribute('width', '1'));
  await odd.locator('.total-bytes').waitFor({ timeout: 5000 });
  const oddForm = JSON.parse(await odd.getAttribute('data-state'));
  eq(oddForm.gpu, 'H200', 'the GPU priced');
  eq(await odd.locator('.total-bytes').getAttribute('data-bytes'), String(nativeSweep(oddForm).plan.totals.total), 'widget on H200');
  // huge figures in TiB and T, like the page
  await docs.evaluate(() => { const e = document.getElementById('odd'); e.setAttribute('width', '16'); e.setAttribute('batch', '65536'); });
  await docs.waitForFunction(() => /TiB$/.test(document.getElementById('odd').shadowRoot.querySelector('.total-bytes')?.textContent ?? ''),
    null, { timeout: 5000 }).catch(() => { throw new Error('the widget shows no TiB for a huge total'); });
  await docs.evaluate(() => document.getElementById('odd').setAttribute('gpu', 'TPU-v9'));
  await odd.locator('.error').waitFor({ timeout: 5000 });
  eq(await odd.locator('select[name="gpu"]').inputValue(), 'TPU-v9', 'an unknown GPU is shown as given');
  assert((await odd.locator('.error').innerText()).includes('unknown GPU "TPU-v9"'), 'unknown GPU message');
  await docs.screenshot({ path: join(ART, 'docs.png'), fullPage: true });
  assert(problems.length === before, problems.slice(before).join('; '));
});

// a run's report.html, opened from disk (report.mjs)
await reportChecks(context);

await context.close();
writeFileSync(join(ART, 'budgets.json'), JSON.stringify(budgets, null, 2));
console.log(`\n${passed.length} passed, ${failures.length} failed`);
if (failures.length) {
  console.log(failures.map((f) => `  - ${f}`).join('\n'));
  process.exit(1);
}
