// report.html in Chromium: a fixture run of DISTILL_BIN (the digits teacher and student
// of tests/fixtures, with --baseline, on the CPU: seconds) writes report.html; opened from disk
// (file://) it renders with no request, no script and no console error, its plots are drawn, and a
// plotted value read back from the page equals metrics.jsonl's (and the last epoch's equals
// report.json's). Run by e2e.mjs (scripts/test-web); alone, with the environment lib.mjs reads:
//   BASE_URL=- EXPLORE_BIN=- PLAN_BIN=- ARTIFACTS=/tmp/a DISTILL_BIN=target/debug/distill node site/e2e/report.mjs
import { chromium } from 'playwright-core';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ART, DISTILL_BIN, assert, check, eq, failures, passed } from './lib.mjs';

const FIXTURES = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'tests', 'fixtures');

/** Runs the digits fixture with --baseline into a new temp folder; returns the run folder. */
function fixtureRun() {
  const out = join(mkdtempSync(join(tmpdir(), 'report-e2e-')), 'run');
  execFileSync(resolve(DISTILL_BIN), ['--teacher', 'teacher-scripted.pt', '--student', 'digits-student.toml',
    '--out', out, '--device', 'cpu', '--baseline', '-q'], { cwd: FIXTURES, stdio: ['ignore', 'ignore', 'inherit'] });
  return out;
}

const lines = (file) => readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l));

/** Every check of report.html, in a page of `context` (a playwright browser context). */
export async function reportChecks(context) {
  let run;
  await check('a fixture run writes report.html', async () => {
    run = fixtureRun();
    assert(readFileSync(join(run, 'report.html'), 'utf8').startsWith('<!DOCTYPE html>'), 'not an HTML page');
  });
  if (!run) return;
  await check('report.html from disk renders its plots with no request, script or console error', async () => {
    const page = await context.newPage();
    const problems = [];
    const url = pathToFileURL(join(run, 'report.html')).href;
    page.on('request', (r) => { if (r.url() !== url) problems.push(`request to ${r.url()}`); });
    page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error ${m.text()}`); });
    page.on('pageerror', (e) => problems.push(`pageerror ${e.message}`));
    await page.goto(url);
    eq(await page.locator('script').count(), 0, 'scripts');
    for (const id of ['loss', 'held-out', 'lr', 'throughput', 'memory-bars', 'phase-bars']) {
      const box = await page.locator(`#${id} svg`).boundingBox();
      assert(box && box.width > 300 && box.height > 100, `#${id}: plot not drawn (${JSON.stringify(box)})`);
    }
    // five loss series on every logged step: the student's loss, KD and CE, the baseline's loss and CE
    const steps = lines(join(run, 'metrics.jsonl')).filter((l) => l.kind === 'step');
    eq(await page.locator('#loss circle.mark').count(), 5 * steps.length, 'dots on the loss plot');
    await page.screenshot({ path: join(ART, 'report.png'), fullPage: true });
    assert(problems.length === 0, problems.join('; '));
    await page.close();
  });
  await check('a plotted value read back from report.html equals metrics.jsonl', async () => {
    const page = await context.newPage();
    await page.goto(pathToFileURL(join(run, 'report.html')).href);
    const steps = lines(join(run, 'metrics.jsonl')).filter((l) => l.kind === 'step');
    const dot = (series, x) => page.locator(`#loss circle.mark[data-series="${series}"][data-x="${x}"]`);
    const [early, late] = [steps[0], steps[steps.length - 1]];
    for (const line of [early, late]) {
      const y = Number(await dot('student loss', line.step).getAttribute('data-y'));
      eq(y, line.loss, `student loss at step ${line.step}`);
      const title = await dot('student loss', line.step).locator('title').textContent();
      assert(title.includes(`step ${line.step}`) && title.includes(String(line.loss)), title);
    }
    // where the browser draws them: the larger loss is the higher dot
    const top = async (line) => (await dot('student loss', line.step).boundingBox()).y;
    eq(early.loss > late.loss, true, 'the fixture\'s loss falls');
    assert(await top(early) < await top(late), 'the larger loss is drawn lower than the smaller');
    const base = lines(join(run, 'baseline', 'metrics.jsonl')).filter((l) => l.kind === 'step')[1];
    eq(Number(await dot('alpha=0 CE', base.step).getAttribute('data-y')), base.ce, `baseline CE at step ${base.step}`);
    const report = JSON.parse(readFileSync(join(run, 'report.json'), 'utf8'));
    const epochs = lines(join(run, 'metrics.jsonl')).filter((l) => l.kind === 'epoch');
    const last = epochs[epochs.length - 1];
    const acc = page.locator(`#held-out circle.mark[data-series="student test accuracy"][data-x="${last.epoch}"]`);
    eq(Number(await acc.getAttribute('data-y')), report.student.test_accuracy, 'last epoch test accuracy vs report.json');
    const training = page.locator('#phase-bars rect.mark[data-label="training"]');
    eq(Number(await training.getAttribute('data-value')), report.phases.training_s, 'training seconds vs report.json');
    await page.close();
  });
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const context = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'report-e2e-profile-')), {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
  });
  await reportChecks(context);
  await context.close();
  console.log(`\n${passed.length} passed, ${failures.length} failed`);
  if (failures.length) {
    console.log(failures.map((f) => `  - ${f}`).join('\n'));
    process.exit(1);
  }
}
