// Helpers of the explorer's end-to-end test (e2e.mjs): the environment scripts/test-web sets, the
// check runner, the native references, and the page's form as the native tools read it.
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run scripts/test-web)`);
  return v;
};
const BASE = env('BASE_URL');
const ART = env('ARTIFACTS');
const EXPLORE_BIN = env('EXPLORE_BIN');
const PLAN_BIN = env('PLAN_BIN');
const DISTILL_BIN = env('DISTILL_BIN');
const DIST = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist');
mkdirSync(ART, { recursive: true });

const failures = [];
const passed = [];
async function check(name, body) {
  try {
    await body();
    passed.push(name);
    console.log(`ok   ${name}`);
  } catch (e) {
    failures.push(`${name}: ${e.message}`);
    console.log(`FAIL ${name}: ${e.message}`);
  }
}
function assert(cond, message) {
  if (!cond) throw new Error(message);
}
function eq(got, want, what) {
  assert(got === want, `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

/** The native sweep for a form (the reference every figure on the page must equal). */
function nativeSweep(form) {
  const out = execFileSync(EXPLORE_BIN, ['-'], { input: JSON.stringify(form), encoding: 'utf8' });
  return JSON.parse(out);
}
const at = (obj, path) => path.split('.').reduce((o, k) => (o == null ? undefined : o[k]), obj);

/** The numeric keys of the form (`ExplorerForm`): everything else in the query is a string. */
const NUMERIC = ['width', 'depth', 'input', 'batch', 'eval_batch', 'sparsity', 'data_parallel', 'zero_stage'];
/** The form as the native tools read it (`ExplorerForm` JSON), from the page's query string. */
function formOf(query, numeric = NUMERIC) {
  const form = {};
  for (const [k, v] of new URLSearchParams(query)) form[k] = numeric.includes(k) ? Number(v) : v;
  return form;
}

/** Every [data-k] figure in `root` (page or frame) compared with the native sweep of the page's form. */
async function compareWithNative(page, what) {
  const form = await stateOf(page);
  const native = nativeSweep(form);
  const figures = await page.$$eval('#explorer [data-k]', (els) =>
    els.map((e) => ({ k: e.dataset.k, bytes: e.dataset.bytes, batch: e.dataset.batch })));
  let compared = 0;
  for (const f of figures) {
    if (f.bytes !== undefined) {
      const want = at(native, f.k);
      assert(want !== undefined, `${what}: ${f.k} is not in the native sweep`);
      eq(f.bytes, String(want), `${what}: ${f.k} (bytes)`);
      compared++;
    } else if (f.batch !== undefined && f.k.endsWith('max_batch')) {
      let want = at(native, f.k);
      // every largest micro-batch shown is at most the scenario's training set
      if (want != null && native.train_samples != null) want = Math.min(want, native.train_samples);
      eq(f.batch, want == null ? '' : String(want), `${what}: ${f.k} (largest micro-batch)`);
      compared++;
    }
  }
  assert(compared >= 60, `${what}: only ${compared} figures compared`);
  return { native, compared, form };
}

/** The page's form: its `data-query` and `data-fragment` (what the URL gets: a pasted cfg.toml
 * travels in the fragment), read as the native tools read it. */
async function stateOf(page) {
  const form = formOf(await page.getAttribute('#explorer', 'data-query'));
  const cfg = new URLSearchParams((await page.getAttribute('#explorer', 'data-fragment')) ?? '').get('cfg');
  if (cfg !== null) form.cfg = cfg;
  return form;
}
async function waitForState(page, pred, what) {
  await page.waitForFunction(
    ([src, formSrc, numeric]) => {
      const q = document.getElementById('explorer')?.dataset.query;
      const form = new Function('q', 'numeric', `return (${formSrc})(q, numeric)`)(q, numeric);
      return q !== undefined && new Function('s', `return (${src})(s)`)(form);
    },
    [pred.toString(), formOf.toString(), NUMERIC],
    { timeout: 5000 },
  ).catch(() => { throw new Error(`timed out waiting for ${what}`); });
}
/** Waits until the URL holds the form (it is written once the form stops changing). */
async function urlSynced(page) {
  await page.waitForFunction(() => {
    const main = document.getElementById('explorer');
    const q = main?.dataset.query;
    const f = main?.dataset.fragment ?? '';
    return q !== undefined && location.search === `?${q}` && location.hash === (f ? `#${f}` : '');
  }, null, { timeout: 5000 }).catch(() => { throw new Error(`the URL never took the form: ${page.url().slice(0, 300)}`); });
}
/** The widest the document scrolls, in CSS pixels. */
const pageWidth = (p) => p.evaluate(() => document.documentElement.scrollWidth);
async function barTotals(page) {
  return page.$$eval('#size-bars text.total', (els) => els.map((e) => e.dataset.bytes));
}

const problems = [];
const ORIGIN = new URL(BASE).origin;
function watch(page, label) {
  // static files only: every request stays on the test server (or is a data:/blob: URL)
  page.on('request', (r) => {
    const url = r.url();
    if (!url.startsWith(`${ORIGIN}/`) && !/^(data|blob):/.test(url)) problems.push(`${label}: network call to ${url}`);
  });
  page.on('pageerror', (e) => problems.push(`${label}: pageerror ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`${label}: console error ${m.text()}`); });
  page.on('requestfailed', (r) => problems.push(`${label}: request failed ${r.url()}`));
  page.on('response', (r) => { if (r.status() >= 400) problems.push(`${label}: HTTP ${r.status()} ${r.url()}`); });
}
async function noPanic(page, label) {
  const panic = await page.$('#panic');
  assert(panic === null, `${label}: the panic report fired: ${panic && (await panic.innerText())}`);
}

export {
  ART, BASE, DIST, DISTILL_BIN, EXPLORE_BIN, PLAN_BIN, assert, at, barTotals, check, compareWithNative, eq, failures,
  formOf, nativeSweep, noPanic, pageWidth, passed, problems, stateOf, urlSynced, waitForState, watch,
};
