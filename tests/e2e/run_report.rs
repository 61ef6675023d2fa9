//! What a run says about itself beyond its students: where its wall time went (`phases` in
//! report.json and the summary), how well it used the device (`utilisation`) and `report.html`.
use distill::host::phase_times::Phase;
use distill::inputs::data::widths::step_widths;
use distill::inputs::data::{Dataset, TextLayout, TextTokenizer};
use distill::TrainOptions;
use e2e::{digits_config, fixture, lm_config, metrics_lines, options, run, text_config, train};
use estimator_wasm::Config;

#[test]
fn the_wall_time_is_split_by_phase_and_the_phases_sum_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = digits_config(dir.path(), &[]);
    // --latency: the exports are timed, so every phase holds time
    let opts = options(&fixture("teacher-scripted.pt"), &cfg, &dir.path().join("run"));
    let report = run(&TrainOptions { baseline: true, latency: true, ..opts }).unwrap();
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run/report.json")).unwrap()).unwrap();
    let phases = &saved["phases"];
    let keys = [
        "startup_s",
        "data_s",
        "teacher_load_s",
        "teacher_pass_s",
        "training_s",
        "evaluation_s",
        "checkpoints_s",
        "export_s",
        "latency_s",
        "other_s",
    ];
    let wall = saved["wall_seconds"].as_f64().unwrap();
    let mut sum = 0.0;
    for key in keys {
        let s = phases[key].as_f64().unwrap_or_else(|| panic!("phases.{key} missing: {phases}"));
        assert!(s >= 0.0, "phases.{key} = {s}");
        sum += s;
    }
    assert_eq!(phases.as_object().unwrap().len(), keys.len(), "{phases}");
    assert!(sum <= wall + 1e-9, "the phases sum to {sum} s, the wall time is {wall} s");
    // every moment is charged to one phase: nothing is lost between them
    assert!(wall - sum < 1e-6, "{sum} against {wall}");
    let p = &report.phases;
    // each phase that ran holds time: the data, the teacher, the steps of both students (their
    // measured step times are part of training), the checkpoints, the exports and their latency
    for phase in [
        Phase::Data,
        Phase::TeacherLoad,
        Phase::TeacherPass,
        Phase::Evaluation,
        Phase::Checkpoints,
        Phase::Export,
        Phase::Latency,
    ] {
        assert!(p.get(phase) > 0.0, "{phase:?}: {p:?}");
    }
    let steps = report.student.train_seconds + report.baseline.as_ref().unwrap().train_seconds;
    assert!(p.training_s >= steps, "training {} s < the steps' {steps} s", p.training_s);
    // the latency phase holds both students' timed calls: each median is met or passed by at
    // least 2 of the (at least 3) calls at batch 1 and at the large batch
    let timed: f64 = [&report.student, report.baseline.as_ref().unwrap()]
        .iter()
        .map(|s| s.latency.expect("--latency times the export"))
        .map(|l| 2.0 * (l.batch_1_ms + l.large_batch_ms) / 1e3)
        .sum();
    assert!(p.latency_s >= timed, "latency {} s < the timed calls' {timed} s: {p:?}", p.latency_s);
    for s in [&report.student, report.baseline.as_ref().unwrap()] {
        let l = s.latency.unwrap();
        assert!(l.batch_1_ms > 0.0 && l.large_batch_ms > l.batch_1_ms, "{l:?}");
        // the digits cfg leaves the evaluation batch at its default, 256
        assert_eq!((l.large_batch, s.latency_not_measured.as_deref()), (256, None));
    }
    assert!(saved["student"]["latency"]["batch_1_ms"].as_f64().unwrap() > 0.0);
    assert!(saved["student"].get("latency_not_measured").is_none(), "{}", saved["student"]);
    let summary = report.summary();
    assert!(summary.contains(&p.line(report.wall_seconds)), "{summary}");
    assert!(summary.contains("time: startup "), "{summary}");
}

#[test]
fn without_latency_asked_for_the_exports_are_not_timed_and_the_report_says_how_to_ask() {
    let dir = tempfile::tempdir().unwrap();
    let prune = "log_every = 10\n[prune]\nsparsity = 0.5\nevery_steps = 10";
    let cfg = digits_config(dir.path(), &[("log_every = 10", prune)]);
    let report = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), true).unwrap();
    // no timed call at all: the latency phase holds not a moment
    assert_eq!(report.phases.latency_s, 0.0, "{:?}", report.phases);
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run/report.json")).unwrap()).unwrap();
    for (name, s) in [("student", &saved["student"]), ("alpha=0", &saved["baseline"])] {
        assert!(s["latency"].is_null(), "{name}: {s}");
        assert_eq!(s["latency_not_measured"], distill::export::latency::NOT_MEASURED, "{name}");
        // the masked dense student of a pruned run is not timed either
        assert!(s["prune"]["dense_latency"].is_null(), "{name}: {}", s["prune"]);
    }
    assert!(distill::export::latency::NOT_MEASURED.contains("pass --latency"));
    let s = &report.student;
    assert_eq!(
        (s.latency.is_none(), s.latency_not_measured.as_deref()),
        (true, Some(distill::export::latency::NOT_MEASURED))
    );
    let html = std::fs::read_to_string(dir.path().join("run/report.html")).unwrap();
    // teacher, student and alpha=0 student: the teacher's cell is a dash, the students' say why
    let unmeasured = "<td>-</td><td>not measured (--latency)</td><td>not measured (--latency)</td>";
    assert!(html.contains(&format!("<tr><th>CPU latency, batch 1</th>{unmeasured}</tr>")), "{html}");
    assert!(html.contains(&format!("<tr><th>CPU latency, large batch</th>{unmeasured}</tr>")), "{html}");
}

/// The `data-y` of the dot of `series` at `x` in `html`.
fn plotted(html: &str, series: &str, x: u64) -> f64 {
    let key = format!("data-series=\"{series}\" data-x=\"{x}\" data-y=\"");
    let at = html.find(&key).unwrap_or_else(|| panic!("no dot of {series} at {x}")) + key.len();
    html[at..at + html[at..].find('"').unwrap()].parse().unwrap()
}

/// The `data-value` of the bar labelled `label` in `html`.
fn bar(html: &str, label: &str) -> f64 {
    let key = format!("data-label=\"{label}\" data-value=\"");
    let at = html.find(&key).unwrap_or_else(|| panic!("no bar {label}")) + key.len();
    html[at..at + html[at..].find('"').unwrap()].parse().unwrap()
}

#[test]
fn report_html_is_self_contained_and_its_plots_read_back_the_runs_own_figures() {
    let dir = tempfile::tempdir().unwrap();
    let prune = "log_every = 10\n[prune]\nsparsity = 0.5\nevery_steps = 10";
    let cfg = digits_config(dir.path(), &[("log_every = 10", prune)]);
    let report = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), true).unwrap();
    let run = dir.path().join("run");
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    // nothing is fetched: no script, no link, no source, no stylesheet import
    for banned in ["<script", "src=", "href=", "<link", "@import", "url("] {
        assert!(!html.contains(banned), "report.html holds {banned}");
    }
    // the dots are metrics.jsonl's figures: a step line's loss parts, an epoch line's held-out
    // figures, the baseline's CE, each exactly
    let lines = metrics_lines(&run.join("metrics.jsonl"));
    let step = lines.iter().filter(|l| l["kind"] == "step").nth(2).unwrap();
    let at = step["step"].as_u64().unwrap();
    assert_eq!(at, 30);
    for (field, series) in
        [("loss", "student loss"), ("kd", "student KD"), ("ce", "student CE"), ("lr", "student learning rate")]
    {
        assert_eq!(plotted(&html, series, at), step[field].as_f64().unwrap(), "{field}");
    }
    let epoch = lines.iter().filter(|l| l["kind"] == "epoch").nth(1).unwrap();
    assert_eq!(plotted(&html, "student test accuracy", 2), epoch["test_accuracy"].as_f64().unwrap());
    assert_eq!(plotted(&html, "student agreement", 2), epoch["agreement"].as_f64().unwrap());
    assert_eq!(plotted(&html, "student sparsity", 2), epoch["sparsity"].as_f64().unwrap());
    let base = metrics_lines(&run.join("baseline/metrics.jsonl"));
    let last = base.iter().rfind(|l| l["kind"] == "step").unwrap();
    let last_step = last["step"].as_u64().unwrap();
    assert_eq!(plotted(&html, "alpha=0 CE", last_step), last["ce"].as_f64().unwrap());
    assert!(!html.contains("alpha=0 KD"), "the baseline has no KD term to plot");
    // the bars are report.json's: sparsity per layer, the wall time by phase
    let p = report.student.prune.as_ref().unwrap();
    assert!(!p.layers.is_empty());
    for layer in &p.layers {
        assert_eq!(bar(&html, &layer.name), layer.sparsity, "{}", layer.name);
    }
    assert_eq!(bar(&html, "training"), report.phases.training_s);
    assert_eq!(bar(&html, "latency"), report.phases.latency_s);
    let memory = report.memory.as_ref().unwrap();
    assert_eq!(bar(&html, "plan: total on the device"), memory.predicted_total_bytes as f64);
    for (name, bytes) in &memory.predicted_breakdown {
        assert_eq!(bar(&html, &format!("plan: {name}")), *bytes as f64);
    }
    assert!(html.contains("<th>student, alpha=0</th>"));
}

/// report.json's `utilisation` of a run, read back.
fn utilisation(dir: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("run/report.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["utilisation"].clone()
}

#[test]
fn a_cpu_run_reports_its_flops_per_sample_achieved_rate_and_mfu_against_a_measured_peak() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = digits_config(dir.path(), &[]);
    let report = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), false).unwrap();
    let u = utilisation(dir.path());
    let f = &u["flops_per_sample"];
    // MLP 64 -> 32 -> 10: fc1 2 x 64 x 32 = 4096, head 2 x 32 x 10 = 640 forward; backward fc1's
    // weight only (its input is the data) and the head's weight and input: 4096 + 1280; KD + CE
    // over 10 logits at 44 each; the teacher's logits are cached (no teacher FLOPs per step)
    assert_eq!(f["student_forward"], 4736.0);
    assert_eq!(f["student_backward"], 5376.0);
    assert_eq!(f["loss"], 440.0);
    assert_eq!((f["teacher_forward"].as_f64(), f["recompute"].as_f64()), (Some(0.0), Some(0.0)));
    assert_eq!(f["model"], 10_552.0);
    let achieved = u["achieved_flops_per_s"].as_f64().unwrap();
    assert_eq!(achieved, 10_552.0 * report.student.samples_per_s);
    assert_eq!(u["peak_source"], "measured");
    let peak = u["peak_flops_per_s"].as_f64().unwrap();
    assert!(peak > 1e8, "a measured fp32 matmul rate: {peak}");
    assert_eq!(u["mfu"].as_f64().unwrap(), achieved / peak);
    let detail = u["peak_detail"].as_str().unwrap();
    assert!(detail.starts_with("measured on this machine: fastest of 5 fp32 1024 x 1024 matmuls"), "{detail}");
    let summary = report.summary();
    let line = distill::report::utilisation::line(report.utilisation.as_ref().unwrap());
    assert!(line.starts_with("utilisation: ") && line.contains("(10.55 kFLOP per sample); MFU "), "{line}");
    assert!(summary.contains(&line), "{summary}");
    let html = std::fs::read_to_string(dir.path().join("run/report.html")).unwrap();
    assert!(html.contains("<th>model FLOPs (per sample)</th><td>10.55 kFLOP</td>"), "{html}");
}

#[test]
fn a_language_models_step_counts_attention_the_online_teacher_and_the_flash_recompute() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = lm_config(dir.path(), &[]);
    let report = train(&fixture("lm/lm-teacher.pt"), &cfg, dir.path(), false).unwrap();
    let f = utilisation(dir.path())["flops_per_sample"].clone();
    // a window of s = 64 tokens, d = 32, 4 query and 2 kv heads of 8, SwiGLU 64, vocab 512:
    // qkv 32 -> 64: 262144; q k^T and probs v: 4 x 64^2 x 32 = 524288; proj 131072;
    // fc1 32 -> 128: 524288; fc2 64 -> 32: 262144; the tied head 32 -> 512: 2097152
    assert_eq!(f["student_forward"], 3_801_088.0);
    assert_eq!(f["student_backward"], 2.0 * 3_801_088.0);
    // the flash backward computes q k^T again
    assert_eq!(f["recompute"], 262_144.0);
    // a language model's teacher runs on every window; known by its count: 2 x params per token
    assert_eq!(f["teacher_forward"], (2 * report.teacher.params * 64) as f64);
    assert_eq!(f["loss"], (64 * 512 * 44) as f64);
}

/// The text fixture's training batches as the trainer cuts them, (rows, width): its sentences
/// tokenised as the run tokenises them, cut by `step_widths` in the cfg's order.
fn text_steps(cfg: &std::path::Path) -> Vec<(u64, u64)> {
    let spec = Config::from_toml_str(&std::fs::read_to_string(cfg).unwrap()).unwrap();
    let max_tokens = spec.data.input_shape[0];
    let tokenizer =
        TextTokenizer::load(&fixture("text/tokenizer.json"), max_tokens, Some(1000), TextLayout::Sentences).unwrap();
    let train = Dataset::load(&fixture("text/text-train.txt"), &spec.data, Some(&tokenizer)).unwrap();
    let text = train.text().unwrap();
    let lengths: Vec<usize> = (0..text.len()).map(|i| text.sentence(i).len()).collect();
    let estimator_wasm::schema::BatchSize::Fixed(batch) = spec.train.batch_size else { panic!("a fixed batch") };
    let t = &spec.train;
    step_widths(&lengths, batch as usize, 1, t.epochs, t.seed, spec.data.bucket_by_length)
}

#[test]
fn a_text_runs_flops_are_its_batches_at_their_own_padded_widths() {
    let dir = tempfile::tempdir().unwrap();
    // length-bucketed batches, as the demos cut them: most batches far narrower than the widest
    let edits = [("classes = 32", "classes = 32\nbucket_by_length = true"), ("epochs = 3", "epochs = 2")];
    let cfg = text_config(dir.path(), &edits);
    let report = train(&fixture("text/text-teacher.pt"), &cfg, dir.path(), false).unwrap();
    let u = utilisation(dir.path());
    let f = &u["flops_per_sample"];
    // one row s tokens wide through the 1-block encoder (d = 32, 4 heads of 8, MLP 64): qkv
    // 2 s 32 96 = 6144 s, q k^T and probs v 4 s^2 32 = 128 s^2, the projection 2048 s, fc1 and
    // fc2 4096 s each: 16,384 s + 128 s^2 forward, twice that backward; the loss 12 x 32 = 384;
    // the teacher's embeddings are cached (no teacher FLOPs per step)
    let row = |s: f64| 3.0 * (16_384.0 * s + 128.0 * s * s) + 384.0;
    let steps = text_steps(&cfg);
    // 2000 sentences in batches of 32 (62 full and one of 16), 2 epochs
    assert_eq!(steps.len(), 2 * 63);
    let rows: u64 = steps.iter().map(|s| s.0).sum();
    assert_eq!(rows, 2 * 2000);
    let widest = steps.iter().map(|s| s.1).max().unwrap();
    assert_eq!(widest, 64, "the longest sentences are truncated to data.input_shape = [64]");
    // the exact padded-token FLOPs of the epochs over their rows
    let mut by_width = std::collections::BTreeMap::new();
    for &(r, w) in &steps {
        *by_width.entry(w).or_insert(0u64) += r;
    }
    let expected = by_width.iter().map(|(&w, &r)| r as f64 * row(w as f64)).sum::<f64>() / rows as f64;
    let model = f["model"].as_f64().unwrap();
    assert!((model - expected).abs() <= 1e-9 * expected, "{model} != {expected}");
    assert_eq!(f["teacher_forward"], 0.0);
    assert_eq!(f["loss"], 384.0);
    // every row at the widest batch's width (the old upper bound) is far more
    let mean_width = steps.iter().map(|&(r, w)| (r * w) as f64).sum::<f64>() / rows as f64;
    assert_eq!(row(64.0), 4_718_976.0);
    assert!(model < 0.5 * row(64.0), "{model} at {mean_width} tokens per row on average");
    let achieved = u["achieved_flops_per_s"].as_f64().unwrap();
    assert_eq!(achieved, model * report.student.samples_per_s);
    let mfu = u["mfu"].as_f64().unwrap();
    assert!(mfu > 0.0 && mfu < 1.0, "MFU {mfu}");
    let basis = u["basis"].as_str().unwrap();
    let prefix = "exact over the epochs' padded batches: each of the 126 training batches of its 2 epochs (the trainer's order) at its own rows and width; ";
    assert_eq!(basis, format!("{prefix}{mean_width:.1} padded tokens per row on average, the widest batch 64"));
    let detail = u["peak_detail"].as_str().unwrap();
    assert!(detail.starts_with("measured on this machine: fastest of 5 fp32 1024 x 1024 matmuls"), "{detail}");
    let html = std::fs::read_to_string(dir.path().join("run/report.html")).unwrap();
    assert!(html.contains("<p class=\"note\">FLOPs per sample exact over the epochs&#39; padded batches: "), "{html}");
}
