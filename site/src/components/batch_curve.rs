//! Memory against micro-batch for the chosen student (log-scale batch axis), with the GPU's
//! capacity, the safety-margin budget and the largest micro-batch marked.
use std::rc::Rc;

use estimator_wasm::explorer::sweep::Sweep;
use yew::prelude::*;

use crate::format;

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
                <title>{ format!("micro-batch {}: {} ({})", p.batch, format::gib(p.total), format::exact(p.total)) }</title>
            </circle>
        }
    });
    let ticks = s.curve.iter().filter(|p| p.batch.is_power_of_two()).map(|p| html! {
        <text class="tick" x={x(p.batch).to_string()} y={(H - BOTTOM + 16.0).to_string()} text-anchor="middle">{ p.batch }</text>
    });
    // the capacity's label sits above its line on the left, the budget's below its line on the right
    let hline = |bytes: u64, class: &'static str, label: String, above: bool| {
        let (tx, ty, anchor) =
            if above { (LEFT + 4.0, y(bytes) - 4.0, "start") } else { (W - 4.0, y(bytes) + 13.0, "end") };
        html! {
            <g class={class}>
                <line x1={LEFT.to_string()} x2={W.to_string()} y1={y(bytes).to_string()} y2={y(bytes).to_string()} />
                <text x={tx.to_string()} y={ty.to_string()} text-anchor={anchor}><title>{ format::exact(bytes) }</title>{ label }</text>
            </g>
        }
    };
    let mark = s.max_batch.map(|m| html! {
        <g class="max-mark">
            <line x1={x(m).to_string()} x2={x(m).to_string()} y1={TOP.to_string()} y2={(H - BOTTOM).to_string()} />
            <text x={(x(m) + 6.0).to_string()} y={(TOP + 12.0).to_string()}>{ format!("largest micro-batch {m}") }</text>
        </g>
    });
    let chosen = html! {
        <line class="chosen-batch" x1={x(s.batch).to_string()} x2={x(s.batch).to_string()}
              y1={TOP.to_string()} y2={(H - BOTTOM).to_string()} />
    };
    html! {
        <figure class="chart" id="batch-curve">
            <figcaption>{ "Memory against micro-batch for the chosen student" }</figcaption>
            <svg viewBox={format!("0 0 {W} {H}")} role="img" aria-label="memory against micro-batch">
                { hline(s.capacity, "capacity", format!("{} {}", s.gpu, format::gib(s.capacity)), true) }
                { hline(s.budget, "budget", format!("budget {} (safety margin kept free)", format::gib(s.budget)), false) }
                if s.batch <= last.batch { { chosen } }
                { for mark }
                <polyline class="curve" points={points.join(" ")} />
                { for dots }
                { for ticks }
                <text class="axis" x={W.to_string()} y={(H - 4.0).to_string()} text-anchor="end">{ "micro-batch (samples per GPU)" }</text>
            </svg>
        </figure>
    }
}
