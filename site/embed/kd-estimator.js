// <kd-estimator>: the distill memory estimator as an element for any page.
//
//   <script type="module" src="embed/kd-estimator.js"></script>
//   <kd-estimator teacher="gpt2" gpu="A100-80GB"></kd-estimator>
//
// Optional attributes: teacher (fashion-mnist-cnn, resnet50, vit-b16, bert-base, gpt2,
// llama-2-7b, llama-3-8b), gpu (a catalogue name), batch (micro-batch), width (width
// multiplier), precision (fp32, fp16, bf16, pure_bf16, bf16_master). The files
// estimator_wasm.js and estimator_wasm_bg.wasm must sit next to this one. Every figure comes
// from the estimator (WebAssembly); this file only draws them.
import init, { defaultForm, explore, gpus, scenarios } from './estimator_wasm.js';

const ready = init();
const GROUPS = [
  ['weights', 'weights', '#3b6ea8'],
  ['gradients', 'gradients', '#7aa6d6'],
  ['optimizer_states', 'optimizer states', '#8f6bb5'],
  ['activations', 'activations', '#e08a2c'],
  ['teacher', 'teacher', '#4f9a6b'],
  ['kd_buffers', 'KD buffers', '#d65c5c'],
  ['data', 'data on the device', '#b08a3e'],
  ['runtime_overhead', 'runtime overhead', '#9aa3ad'],
];
const PRECISIONS = ['fp32', 'fp16', 'bf16', 'pure_bf16', 'bf16_master'];
/** The largest micro-batch the estimator takes (2^40, `train.batch_size`'s bound). */
const MAX_BATCH = 2 ** 40;
/** A user's text as a message repeats it: at most 24 characters. */
const shorten = (s) => ([...String(s)].length > 24 ? `${[...String(s)].slice(0, 24).join('')}...` : String(s));

/** Bytes in the binary unit that fits them, as the page shows them (site/src/format.rs): whole
 * bytes below 1 KiB, else one decimal from 100 of the unit, two below (display only). */
function gib(bytes) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];
  let v = bytes;
  let unit = 0;
  while (v >= 1024 && unit + 1 < units.length) { v /= 1024; unit += 1; }
  if (unit === 0) return `${bytes} B`;
  return `${v >= 100 ? v.toFixed(1) : v.toFixed(2)} ${units[unit]}`;
}
/** A parameter count as 26.8k, 81.9M, 1.10B or 35.18T (display only). */
function params(n) {
  if (n >= 1e12) return `${(n / 1e12).toFixed(2)}T`;
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)}B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return String(n);
}
const exact = (bytes) => `${bytes.toLocaleString('en-US')} bytes`;
const escape = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);

const STYLE = `
  :host { display: block; font: 14px/1.4 system-ui, sans-serif; border: 1px solid #d7dce2; border-radius: 6px;
          padding: 10px 12px; max-width: 640px; box-sizing: border-box; background: #fff; color: #1d232b; }
  select { max-width: 100%; } .out { overflow-wrap: anywhere; }
  .controls { display: flex; flex-wrap: wrap; gap: 6px 12px; align-items: end; }
  label { display: flex; flex-direction: column; font-size: 12px; color: #5b6572; }
  input, select { font: inherit; padding: 2px 4px; }
  input { width: 6em; }
  .bar { position: relative; display: flex; height: 22px; margin: 12px 0 4px; background: #f1f3f5; border-radius: 3px; }
  .bar i { display: block; height: 100%; }
  .cap { position: absolute; top: -4px; bottom: -4px; border-left: 2px dashed #b3261e; }
  .legend { display: flex; flex-wrap: wrap; gap: 2px 10px; font-size: 12px; color: #5b6572; }
  .legend b { display: inline-block; width: 9px; height: 9px; margin-right: 4px; }
  .total { margin: 6px 0 0; } .fits { color: #1e7a3c; } .short, .error { color: #b3261e; }
  span[title] { border-bottom: 1px dotted #5b6572; cursor: help; }`;

class KdEstimator extends HTMLElement {
  static observedAttributes = ['teacher', 'gpu', 'batch', 'width', 'precision'];

  constructor() {
    super();
    this.attachShadow({ mode: 'open' });
  }

  async connectedCallback() {
    await ready;
    this.form = this.formFromAttributes();
    this.build();
    this.update();
  }

  attributeChangedCallback() {
    if (!this.form) return;
    this.form = this.formFromAttributes();
    this.build();
    this.update();
  }

  /** The estimator's default form for the teacher, with the attributes applied; the texts of
   * `width` and `batch` are kept as given (`this.texts`), and set the form only when valid. */
  formFromAttributes() {
    const teacher = this.getAttribute('teacher') || 'gpt2';
    const gpu = this.getAttribute('gpu') || 'A100-80GB';
    let form;
    try {
      form = JSON.parse(defaultForm(teacher, gpu)); // a catalogue GPU by its exact name (h200 -> H200)
    } catch (e) {
      // an unknown teacher: the default one, and the estimator's message (shown by update)
      form = JSON.parse(defaultForm('gpt2', gpu));
      form.teacher = teacher;
    }
    this.texts = {};
    for (const key of ['batch', 'width']) {
      if (this.hasAttribute(key)) this.texts[key] = this.getAttribute(key);
    }
    if (this.hasAttribute('precision')) form.precision = this.getAttribute('precision');
    return form;
  }

  build() {
    const f = this.form;
    const option = (value, label, selected) =>
      `<option value="${escape(value)}"${value === selected ? ' selected' : ''}>${escape(label)}</option>`;
    // a value that is not among the options (an unknown teacher or GPU) is shown as given (a
    // short prefix of a long one), never as another; update() says why it cannot be priced
    const choices = (values, selected) => {
      const list = values.includes(selected) ? values : [...values, [selected, shorten(selected)]];
      return list.map((v) => (Array.isArray(v) ? option(v[0], v[1], selected) : option(v, v, selected))).join('');
    };
    const teachers = JSON.parse(scenarios()).map((s) => [s.key, s.name]);
    const known = teachers.some(([k]) => k === f.teacher) ? teachers : [...teachers, [f.teacher, shorten(f.teacher)]];
    const teacherOptions = known.map(([k, name]) => option(k, name, f.teacher)).join('');
    const cards = choices(JSON.parse(gpus()).map((g) => g.name), f.gpu);
    const precisions = choices(PRECISIONS, f.precision);
    const text = (key) => escape(this.texts[key] ?? f[key]);
    this.shadowRoot.innerHTML = `<style>${STYLE}</style>
      <div class="controls">
        <label>teacher<select name="teacher">${teacherOptions}</select></label>
        <label>student width<input name="width" inputmode="decimal" value="${text('width')}"></label>
        <label>micro-batch<input name="batch" inputmode="numeric" value="${text('batch')}"></label>
        <label>precision<select name="precision">${precisions}</select></label>
        <label>GPU<select name="gpu">${cards}</select></label>
      </div>
      <div class="out" aria-live="polite"></div>`;
    this.shadowRoot.querySelector('.controls').addEventListener('change', (e) => this.onInput(e));
    this.shadowRoot.querySelector('.controls').addEventListener('input', (e) => this.onInput(e));
  }

  onInput(e) {
    const { name, value } = e.target;
    if (name === 'teacher') {
      if (e.type !== 'change') return;
      this.form = { ...JSON.parse(defaultForm(value, this.form.gpu)) };
      this.texts = {};
      this.build();
    } else if (name === 'width' || name === 'batch') {
      this.texts[name] = value;
    } else {
      this.form[name] = value;
    }
    this.update();
  }

  /** The message for a typed width or micro-batch that is not a valid value, or null; a valid
   * one is set in the form. The estimator checks the rest of the ranges. */
  readTexts() {
    const { width, batch } = this.texts;
    if (batch !== undefined) {
      const b = Number(batch.trim());
      if (batch.trim() === '' || !Number.isInteger(b) || b < 1 || b > MAX_BATCH) {
        return `micro-batch: "${shorten(batch)}" is not a whole number of samples from 1 to 1,099,511,627,776`;
      }
      this.form.batch = b;
    }
    if (width !== undefined) {
      const w = Number(width.trim());
      if (width.trim() === '' || !Number.isFinite(w)) return `width: "${shorten(width)}" is not a number`;
      this.form.width = w;
    }
    return null;
  }

  update() {
    const out = this.shadowRoot.querySelector('.out');
    const bad = this.readTexts();
    this.dataset.state = JSON.stringify(this.form);
    if (bad) {
      out.innerHTML = `<p class="error" role="alert">${escape(bad)}</p>`;
      return;
    }
    let s;
    try {
      s = JSON.parse(explore(JSON.stringify(this.form)));
    } catch (e) {
      out.innerHTML = `<p class="error" role="alert">${escape(e.message)}</p>`;
      return;
    }
    const b = s.students[s.chosen].breakdown;
    const scale = Math.max(b.total, s.capacity);
    const segments = GROUPS.filter(([k]) => b[k] > 0)
      .map(([k, label, color]) => `<i data-k="${k}" data-bytes="${b[k]}" style="width:${(100 * b[k]) / scale}%;background:${color}"
          title="${escape(label)}: ${gib(b[k])} (${exact(b[k])})"></i>`)
      .join('');
    const legend = GROUPS.map(([, label, color]) => `<span><b style="background:${color}"></b>${label}</span>`).join('');
    const fit = s.plan.fit;
    const verdict = fit.fits
      ? `<span class="fits">fits, ${gib(fit.free)} free</span>`
      : `<span class="short">does not fit, ${gib(fit.short)} short</span>`;
    const max = s.max_batch == null ? 'none fits' : s.max_batch;
    out.innerHTML = `<div class="bar">${segments}<span class="cap" style="left:${(100 * s.capacity) / scale}%"
        title="${escape(s.gpu)}: ${exact(s.capacity)}"></span></div>
      <div class="legend">${legend}</div>
      <p class="total">Student of ${params(s.plan.params.student)} parameters at micro-batch ${s.batch}:
        <strong><span class="total-bytes" data-bytes="${b.total}" title="${exact(b.total)}">${gib(b.total)}</span></strong>
        on ${escape(s.gpu)} (<span title="${exact(s.capacity)}">${gib(s.capacity)}</span>): ${verdict}.
        Largest micro-batch: <strong class="max-batch">${max}</strong>.</p>`;
  }
}

customElements.define('kd-estimator', KdEstimator);
