//! Memory against micro-batch for the chosen student (log-scale batch axis), with the GPU's
//! capacity, the safety-margin budget and the largest micro-batch marked.
use std::rc::Rc;

use estimator_wasm::explorer::sweep::Sweep;
use yew::prelude::*;

use crate::format;
use crate::placement::{self, Rect, Segment};

#[derive(Properties, PartialEq)]
pub struct BatchCurveProps {
    pub sweep: Rc<Sweep>,
}

const W: f64 = 640.0;
const H: f64 = 260.0;
const LEFT: f64 = 64.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 36.0;

#[component]
pub fn BatchCurve(props: &BatchCurveProps) -> Html {
    let s = &props.sweep;
    let Some(last) = s.curve.last() else {
        return html! { <p class="field-error">{ "no micro-batch could be priced" }</p> };
    };
    let top = (last.total.max(s.capacity) as f64 * 1.05).max(1.0);
    let right = (last.batch as f64).log2().max(1.0);
    let x = |b: u64| LEFT + (W - LEFT - 12.0) * (b as f64).log2() / right;
    let y = |bytes: u64| TOP + (H - TOP - BOTTOM) * (1.0 - bytes as f64 / top);
    let points: Vec<String> = s.curve.iter().map(|p| format!("{:.1},{:.1}", x(p.batch), y(p.total))).collect();
    let dots = s.curve.iter().enumerate().map(|(i, p)| {
        html! {
            <circle class={classes!("dot", (Some(p.batch) == s.max_batch).then_some("max"))} cx={x(p.batch).to_string()}
                    cy={y(p.total).to_string()} r={if Some(p.batch) == s.max_batch { "6" } else { "3.5" }}
                    data-k={format!("curve.{i}.total")} data-bytes={p.total.to_string()} data-batch={p.batch.to_string()}>
                <title>{ format!("micro-batch {}: {} ({})", p.batch, format::bytes(p.total), format::exact(p.total)) }</title>
            </circle>
        }
    });
    // a label every `stride` doublings, so that neighbours never touch; one that would run past
    // the right edge centred on its tick ends at the edge instead
    let widest = s.curve.iter().filter(|p| p.batch.is_power_of_two()).map(|p| p.batch.to_string().len()).max();
    let stride = placement::tick_stride((W - LEFT - 12.0) / right, widest.unwrap_or(1));
    let ticks = s.curve.iter().filter(|p| p.batch.is_power_of_two() && p.batch.trailing_zeros() % stride == 0).map(|p| {
        let (tx, anchor) = match x(p.batch) {
            tx if tx + p.batch.to_string().len() as f64 * placement::CHAR_W / 2.0 > W => (W - 1.0, "end"),
            tx => (tx, "middle"),
        };
        html! {
            <text class="tick" x={tx.to_string()} y={(H - BOTTOM + 16.0).to_string()} text-anchor={anchor}>{ p.batch }</text>
        }
    });
    // the labels go where no line crosses them: the capacity's above its line and the
    // budget's below its line, each at the first clear spot (an end, else just past a mark);
    // then the largest batch's beside its line, or in the first row clear of every line; all
    // drawn last on a halo
    let hline = |bytes: u64, class: &'static str| {
        html! {
            <g class={class}>
                <line x1={LEFT.to_string()} x2={W.to_string()} y1={y(bytes).to_string()} y2={y(bytes).to_string()} />
            </g>
        }
    };
    let mut segments: Vec<Segment> =
        s.curve.windows(2).map(|w| ((x(w[0].batch), y(w[0].total)), (x(w[1].batch), y(w[1].total)))).collect();
    segments.extend(s.max_batch.map(|m| ((x(m), TOP), (x(m), H - BOTTOM))));
    if s.batch <= last.batch {
        segments.push(((x(s.batch), TOP), (x(s.batch), H - BOTTOM)));
    }
    let mut boxes: Vec<Rect> = s
        .curve
        .iter()
        .map(|p| Rect { x0: x(p.batch) - 6.0, x1: x(p.batch) + 6.0, y0: y(p.total) - 6.0, y1: y(p.total) + 6.0 })
        .collect();
    let span = (LEFT + 2.0, W - 2.0);
    // a label's text on one line where a spot is clear, else its parts stacked (narrower)
    let mut hlabel = |bytes: u64, class: &'static str, parts: Vec<String>, above: bool| {
        let one = parts.join(" ");
        let widest = parts.iter().map(|p| p.chars().count()).max().unwrap_or(0);
        let place = |(chars, lines): (usize, usize), boxes: &[Rect]| {
            let right = W - 4.0 - chars as f64 * placement::CHAR_W;
            let preferred = if above { [LEFT + 4.0, right] } else { [right, LEFT + 4.0] };
            // the row beside the line first, then rows further from it (up for a label above
            // its line, down for one below) while they stay in the plot
            let below = placement::LINE_H * lines.saturating_sub(1) as f64;
            let first = if above { y(bytes) - 5.0 - below } else { y(bytes) + 14.0 };
            let step = if above { -17.0 } else { 17.0 };
            let mut rows = (0..)
                .map(|i| first + step * i as f64)
                .take_while(|&ty| ty >= TOP + 12.0 && ty + below <= H - BOTTOM - 4.0);
            rows.find_map(|ty| {
                placement::clear_spot((chars, lines), ty, span, &preferred, &segments, boxes).map(|tx| (tx, ty))
            })
            .ok_or((preferred[0], first))
        };
        let (size, (tx, ty)) = match place((one.chars().count(), 1), &boxes) {
            Ok(spot) => ((one.chars().count(), 1), spot),
            Err(fallback) => match place((widest, parts.len()), &boxes) {
                Ok(spot) => ((widest, parts.len()), spot),
                Err(_) => ((one.chars().count(), 1), fallback),
            },
        };
        boxes.push(Rect::lines(tx, ty, size.0, size.1));
        let lines = if size.1 == 1 { vec![one] } else { parts };
        label(classes!(class, "label"), (tx, ty), lines, Some(format::exact(bytes)))
    };
    let margin = s.capacity.saturating_sub(s.budget);
    let capacity_label = hlabel(s.capacity, "capacity", vec![format!("{} {}", s.gpu, format::bytes(s.capacity))], true);
    let budget_label = hlabel(
        s.budget,
        "budget",
        vec![format!("budget {}", format::bytes(s.budget)), format!("({} kept free)", format::bytes(margin))],
        false,
    );
    let mark = s.max_batch.map(|m| {
        html! {
            <g class="max-mark">
                <line x1={x(m).to_string()} x2={x(m).to_string()} y1={TOP.to_string()} y2={(H - BOTTOM).to_string()} />
            </g>
        }
    });
    let mark_label = s.max_batch.map(|m| {
        let text = format!("memory fits up to micro-batch {m}");
        let chars = text.chars().count();
        let preferred = [x(m) + 6.0, x(m) - 6.0 - chars as f64 * placement::CHAR_W, LEFT + 4.0];
        segments.extend([s.capacity, s.budget].map(|b| ((LEFT, y(b)), (W, y(b)))));
        let mut rows = (0..).map(|i| TOP + 12.0 + 17.0 * i as f64).take_while(|&ty| ty <= H - BOTTOM - 4.0);
        let spot = rows
            .find_map(|ty| {
                placement::clear_spot((chars, 1), ty, span, &preferred, &segments, &boxes).map(|tx| (tx, ty))
            })
            .unwrap_or((preferred[1].max(LEFT + 4.0), TOP + 12.0));
        label(classes!("max-mark", "label"), spot, vec![text], None)
    });
    let chosen = html! {
        <line class="chosen-batch" x1={x(s.batch).to_string()} x2={x(s.batch).to_string()}
              y1={TOP.to_string()} y2={(H - BOTTOM).to_string()} />
    };
    html! {
        <figure class="chart" id="batch-curve">
            <figcaption>{ "Memory against micro-batch for the chosen student" }</figcaption>
            <svg viewBox={format!("0 0 {W} {H}")} role="img" aria-label="memory against micro-batch">
                { hline(s.capacity, "capacity") }
                { hline(s.budget, "budget") }
                if s.batch <= last.batch { { chosen } }
                { for mark }
                <polyline class="curve" points={points.join(" ")} />
                { for dots }
                { for ticks }
                { capacity_label }
                { for mark_label }
                { budget_label }
                <text class="axis" x={W.to_string()} y={(H - 4.0).to_string()} text-anchor="end">{ "micro-batch (samples per GPU)" }</text>
            </svg>
        </figure>
    }
}

/// A chart label in a group of `class`: its `lines` stacked from the baseline at `(tx, ty)` on a
/// halo, with `title` as its hover text.
fn label(class: Classes, (tx, ty): (f64, f64), lines: Vec<String>, title: Option<String>) -> Html {
    html! {
        <g {class}>
            <text class="halo" x={tx.to_string()} y={ty.to_string()}>
                if let Some(t) = title { <title>{ t }</title> }
                { for lines.into_iter().enumerate().map(|(i, line)| html! {
                    <tspan x={tx.to_string()} dy={if i == 0 { "0".to_string() } else { placement::LINE_H.to_string() }}>{ line }</tspan>
                }) }
            </text>
        </g>
    }
}
