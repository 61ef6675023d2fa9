//! A stacked bar per student size, side by side, against the GPU's capacity line (marked above
//! the chart when it would flatten the bars). Clicking a bar makes that size the chosen student.
use std::rc::Rc;

use estimator_wasm::explorer::sweep::{Sweep, GROUPS};
use estimator_wasm::explorer::FormField;
use yew::prelude::*;

use crate::format;

#[derive(Properties, PartialEq)]
pub struct SizeBarsProps {
    pub sweep: Rc<Sweep>,
    pub onset: Callback<(FormField, String)>,
}

const W: f64 = 700.0;
const H: f64 = 300.0;
const LEFT: f64 = 64.0;
/// Room right of the bars for the capacity label.
const RIGHT: f64 = 96.0;
const TOP: f64 = 24.0;
const BOTTOM: f64 = 52.0;

#[component]
pub fn SizeBars(props: &SizeBarsProps) -> Html {
    let s = &props.sweep;
    let tallest = s.students.iter().filter_map(|st| st.breakdown.map(|b| b.total)).max().unwrap_or(0);
    // the scale holds the GPU's line unless that would flatten the bars (the tallest under 40% of
    // it): then the bars fill the chart and the line is marked above it, off the scale
    let off_scale = (tallest as f64) < 0.4 * s.capacity as f64;
    let top = if off_scale { tallest as f64 * 1.15 } else { tallest.max(s.capacity) as f64 * 1.08 }.max(1.0);
    let plot_h = H - TOP - BOTTOM;
    let y = |bytes: u64| TOP + plot_h * (1.0 - bytes as f64 / top);
    // a total sits 6 units above its bar; one whose text (11 units above its baseline, 4 below)
    // would touch the GPU's line sits 7 units above that line instead
    let line_y = (!off_scale).then(|| y(s.capacity));
    let total_y = |total: u64| {
        let ty = y(total) - 6.0;
        match line_y {
            Some(ly) if ty - 13.0 < ly + 2.0 && ty + 6.0 > ly - 2.0 => ty.min(ly - 7.0),
            _ => ty,
        }
    };
    let slot = (W - LEFT - RIGHT) / s.students.len() as f64;
    let bar_w = slot * 0.56;
    // at a small width several factors round to the same student: say why their bars are equal
    let params: Vec<u64> = s.students.iter().filter_map(|st| st.params).collect();
    let repeated = params.windows(2).any(|w| w[0] == w[1]);
    let bars = s.students.iter().enumerate().map(|(i, st)| {
        let x = LEFT + slot * i as f64 + (slot - bar_w) / 2.0;
        let cx = x + bar_w / 2.0;
        let width = format::number(st.width);
        let onclick = props.onset.reform(move |_: MouseEvent| (FormField::Width, width.clone()));
        let label = format!("x{}", format::number(st.scale));
        let params = st.params.map(format::params).unwrap_or_default();
        let body = match &st.breakdown {
            Some(b) => {
                let mut base = 0u64;
                let segments = b.groups().into_iter().zip(GROUPS).filter(|((_, v), _)| *v > 0).map(|((key, v), (_, name))| {
                    let (y1, y0) = (y(base + v), y(base));
                    base += v;
                    html! {
                        <rect class={classes!("seg", format!("g-{key}"))} x={x.to_string()} y={y1.to_string()}
                              width={bar_w.to_string()} height={(y0 - y1).max(0.0).to_string()}
                              data-k={format!("students.{i}.breakdown.{key}")} data-bytes={v.to_string()}>
                            <title>{ format!("{name}: {} ({})", format::bytes(v), format::exact(v)) }</title>
                        </rect>
                    }
                });
                html! {
                    <>
                        { for segments }
                        <text class="total" x={cx.to_string()} y={total_y(b.total).to_string()} text-anchor="middle"
                              data-k={format!("students.{i}.breakdown.total")} data-bytes={b.total.to_string()}>
                            <title>{ format::exact(b.total) }</title>
                            { format::bytes(b.total) }
                        </text>
                    </>
                }
            }
            None => html! {
                <text class="na" x={cx.to_string()} y={(TOP + plot_h - 8.0).to_string()} text-anchor="middle">
                    <title>{ st.error.clone().unwrap_or_default() }</title>{ "n/a" }
                </text>
            },
        };
        html! {
            <g key={i} class={classes!("bar", (i == s.chosen).then_some("chosen"), (st.fits == Some(false)).then_some("over"))}
               data-scale={format::number(st.scale)} {onclick}>
                <rect class="hit" x={(x - 6.0).to_string()} y={TOP.to_string()} width={(bar_w + 12.0).to_string()}
                      height={plot_h.to_string()} />
                { body }
                <text class="label" x={cx.to_string()} y={(H - BOTTOM + 18.0).to_string()} text-anchor="middle">{ label }</text>
                <text class="params" x={cx.to_string()} y={(H - BOTTOM + 34.0).to_string()} text-anchor="middle">{ params }</text>
            </g>
        }
    });
    let grid = format::ticks(top as u64, 4).into_iter().map(|(bytes, label)| {
        html! {
            <g class="grid">
                <line x1={LEFT.to_string()} x2={(W - RIGHT).to_string()} y1={y(bytes).to_string()} y2={y(bytes).to_string()} />
                <text x={(LEFT - 6.0).to_string()} y={(y(bytes) + 4.0).to_string()} text-anchor="end">{ label }</text>
            </g>
        }
    });
    let capacity = if off_scale {
        html! {
            // one line in the margin above the plot, ending at the chart's right edge: the tallest
            // bar's total sits below it (the scale tops out 15% above that bar), and no width of
            // the label's text runs past the edge
            <g class="capacity off-scale" id="capacity-off-scale">
                <text class="capacity-label" x={(W - 2.0).to_string()} y={(TOP - 9.0).to_string()} text-anchor="end">
                    <title>{ format::exact(s.capacity) }</title>
                    { format!("\u{2191} {} {}, above the scale", s.gpu, format::bytes(s.capacity)) }
                </text>
            </g>
        }
    } else {
        html! {
            <>
                <line class="capacity" x1={LEFT.to_string()} x2={(W - RIGHT + 4.0).to_string()} y1={y(s.capacity).to_string()} y2={y(s.capacity).to_string()} />
                <text class="capacity-label" x={(W - RIGHT + 8.0).to_string()} y={(y(s.capacity) - 2.0).to_string()}>
                    <title>{ format::exact(s.capacity) }</title>
                    <tspan>{ s.gpu }</tspan>
                    <tspan x={(W - RIGHT + 8.0).to_string()} dy="13">{ format::bytes(s.capacity) }</tspan>
                </text>
            </>
        }
    };
    html! {
        <figure class="chart" id="size-bars">
            <figcaption>{ format!("Peak memory per GPU at micro-batch {}, by student width (click a bar to choose it)", s.batch) }</figcaption>
            <svg viewBox={format!("0 0 {W} {H}")} role="img" aria-label="stacked bars of memory per student size">
                { for grid }
                { for bars }
                { capacity }
            </svg>
            <ul class="legend">
                { for GROUPS.iter().map(|(key, name)| html! { <li><i class={format!("g-{key}")}></i>{ *name }</li> }) }
            </ul>
            if repeated {
                <p class="hint" id="same-sizes">{ "Some widths round to the same student (every layer keeps at least one \
                    channel, unit or head), so their bars are the same." }</p>
            }
        </figure>
    }
}
