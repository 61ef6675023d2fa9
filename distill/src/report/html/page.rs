//! The page of `report.html`: one self-contained HTML file (inline style, inline SVG, no script,
//! nothing fetched), its sections in reading order: the students, the curves, pruning, memory,
//! and where the wall time went.
use plotters::style::RGBColor;

use super::chart::{LineChart, Series};
use super::curves::Curves;
use super::markup::escape;
use super::tables;
use crate::report::Report;

/// The student's colours, series by series, and the baseline's.
pub(crate) const STUDENT: [RGBColor; 4] =
    [RGBColor(31, 119, 180), RGBColor(44, 160, 44), RGBColor(148, 103, 189), RGBColor(23, 190, 207)];
const BASELINE: [RGBColor; 4] =
    [RGBColor(255, 127, 14), RGBColor(140, 86, 75), RGBColor(227, 119, 194), RGBColor(188, 189, 34)];

/// The pages' style sheet (this page's and `distill compare`'s).
pub(crate) const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:800px;color:#222}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;margin:8px 0}td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #eee}\
th:first-child{text-align:left;font-weight:normal}thead th{font-weight:600}\
figure{margin:8px 0}figcaption span{margin-right:14px;white-space:nowrap}\
figcaption i{display:inline-block;width:12px;height:3px;margin:0 5px 3px 0;vertical-align:middle}\
.note{color:#777}code{font-size:13px}";

/// The curves of both students for `fields` (`(metrics.jsonl field, legend name)`) of `kind`
/// lines against `x`: the student's series `student NAME`, the baseline's `alpha=0 NAME` (its
/// fields `baseline_fields`, as indices into `fields`).
fn both(
    student: &Curves,
    baseline: Option<&Curves>,
    (kind, x): (&str, &str),
    fields: &[(&str, &str)],
    baseline_fields: &[usize],
) -> Vec<Series> {
    let mut series: Vec<Series> = fields
        .iter()
        .enumerate()
        .map(|(i, (field, name))| Series {
            name: format!("student {name}"),
            colour: STUDENT[i % STUDENT.len()],
            points: student.series(kind, x, field),
        })
        .collect();
    if let Some(b) = baseline {
        series.extend(baseline_fields.iter().map(|&i| Series {
            name: format!("alpha=0 {}", fields[i].1),
            colour: BASELINE[i % BASELINE.len()],
            points: b.series(kind, x, fields[i].0),
        }));
    }
    series
}

fn chart(id: &str, x: &str, y: &str, series: Vec<Series>) -> String {
    LineChart { id: id.into(), x_label: x.into(), y_label: y.into(), series }.html()
}

fn section(title: &str, body: &str) -> String {
    format!("<h2>{}</h2>{body}", escape(title))
}

/// The whole page of a run: `report` and its students' curves (`baseline` with `--baseline`).
pub fn render(report: &Report, student: &Curves, baseline: Option<&Curves>) -> String {
    let all: Vec<usize> = (0..4).collect();
    let steps = ("step", "step");
    let epochs = ("epoch", "epoch");
    let mut body = String::new();
    body.push_str(&format!(
        "<h1>distill run</h1><p><code>{}</code> &rarr; <code>{}</code><br>teacher <code>{}</code>, device {}, distill {}</p>",
        escape(&report.config),
        escape(&report.output_dir),
        escape(&report.teacher.path),
        escape(&report.device),
        escape(report.distill_version)
    ));
    body.push_str(&section("Teacher and students", &tables::students(report)));
    // the baseline has no KD term: its kd line would be zero throughout (nor hidden pairs); the
    // hidden pairs' term where the run had some
    let parts = [("loss", "loss"), ("kd", "KD"), ("ce", "CE"), ("hidden", "hidden")];
    let parts = if student.has("step", "hidden") { &parts[..] } else { &parts[..3] };
    let losses = both(student, baseline, steps, parts, &[0, 2]);
    body.push_str(&section(
        "Loss per logged step (mean since the previous line)",
        &chart("loss", "step", "loss", losses),
    ));
    let metric = match report.student.agreement_metric {
        crate::train::objective::Agreement::Top1 => "agreement",
        crate::train::objective::Agreement::Cosine => "cosine",
    };
    let held_out = [("test_accuracy", "test accuracy"), ("agreement", metric), ("spearman", "Spearman")];
    let held_out = both(student, baseline, epochs, &held_out, &all[..3]);
    body.push_str(&section("Held-out figures per epoch", &chart("held-out", "epoch", "value", held_out)));
    if student.has("epoch", "perplexity") {
        let ppl = both(student, baseline, epochs, &[("perplexity", "perplexity")], &[0]);
        body.push_str(&section("Test perplexity per epoch", &chart("perplexity", "epoch", "perplexity", ppl)));
    }
    let lr = both(student, baseline, steps, &[("lr", "learning rate")], &[0]);
    body.push_str(&section("Learning rate", &chart("lr", "step", "learning rate", lr)));
    if student.has("step", "loss_scale") {
        let scale = both(student, baseline, steps, &[("loss_scale", "loss scale")], &[0]);
        body.push_str(&section("fp16 loss scale", &chart("loss-scale", "step", "loss scale", scale)));
    }
    let speed = both(student, baseline, steps, &[("samples_per_s", "samples/s")], &[0]);
    body.push_str(&section("Throughput per logged step", &chart("throughput", "step", "samples/s", speed)));
    if let Some(p) = &report.student.prune {
        let bars = p
            .layers
            .iter()
            .map(|l| super::bars::Bar {
                label: l.name.clone(),
                value: l.sparsity,
                length: l.sparsity,
                text: format!("{:.2}% zero ({} of {} non-zero)", 100.0 * l.sparsity, l.nonzero, l.dense),
                colour: STUDENT[0],
            })
            .collect();
        let layers = super::bars::BarChart { id: "sparsity-layers".into(), axis: "sparsity".into(), bars }.html();
        let per_epoch =
            chart("sparsity", "epoch", "sparsity", both(student, None, epochs, &[("sparsity", "sparsity")], &[]));
        let text = format!(
            "<p>{} pruning ({} ranking) to {:.0}%: measured weight sparsity {:.2}%</p>{layers}{per_epoch}",
            escape(&p.method),
            escape(&p.scope),
            100.0 * p.target_sparsity,
            100.0 * p.weight_sparsity
        );
        body.push_str(&section("Sparsity per layer (exported student)", &text));
    }
    match &report.memory {
        Some(m) => body.push_str(&section("Memory: the plan beside the measured peaks", &tables::memory(m))),
        None => body.push_str(&section("Memory", "<p class=\"note\">no plan: the device's memory is unknown</p>")),
    }
    body.push_str(&section("Where the wall time went", &tables::phases(report)));
    if let Some(u) = &report.utilisation {
        body.push_str(&section("Utilisation: FLOPs of the training steps", &tables::utilisation(u)));
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>distill: {}</title><style>{STYLE}</style></head><body>{body}</body></html>\n",
        escape(&report.output_dir)
    )
}
