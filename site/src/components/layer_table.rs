//! The chosen student's per-layer table (on demand): parameters, model states and the
//! activations each layer saves for backward, at the micro-batch.
use std::rc::Rc;

use estimator_wasm::explorer::sweep::Sweep;
use yew::prelude::*;

use super::bytes::Bytes;
use crate::format;

#[derive(Properties, PartialEq)]
pub struct LayerTableProps {
    pub sweep: Rc<Sweep>,
    pub open: bool,
    pub ontoggle: Callback<()>,
}

#[component]
pub fn LayerTable(props: &LayerTableProps) -> Html {
    let onclick = props.ontoggle.reform(|_: MouseEvent| ());
    let layers = &props.sweep.plan.layers;
    let checkpointing = layers.iter().any(|l| l.kept_bytes.is_some());
    let rows = layers.iter().enumerate().map(|(i, l)| {
        let b = |field: &str, v: u64| html! { <td><Bytes value={v} k={format!("plan.layers.{i}.{field}")} /></td> };
        html! {
            <tr key={l.id.clone()}>
                <td>{ &l.id }</td>
                <td>{ l.kind }</td>
                <td>{ format!("{:?}", l.output) }</td>
                <td title={format::grouped(l.params)}>{ format::params(l.params) }</td>
                { b("weight_bytes", l.weight_bytes) }
                { b("grad_bytes", l.grad_bytes) }
                { b("optimizer_bytes", l.optimizer_bytes) }
                { b("saved_bytes", l.saved_bytes) }
                if checkpointing {
                    if let Some(kept) = l.kept_bytes { { b("kept_bytes", kept) } } else { <td>{ "-" }</td> }
                }
            </tr>
        }
    });
    html! {
        <section class="layers">
            <button id="toggle-layers" type="button" {onclick}>
                { if props.open { "Hide the per-layer table" } else { "Show the per-layer table" } }
            </button>
            if props.open {
                <table class="figures" id="layer-table">
                    <thead><tr>
                        <th>{ "layer" }</th><th>{ "kind" }</th><th>{ "output per sample" }</th><th>{ "parameters" }</th>
                        <th>{ "weights" }</th><th>{ "gradients" }</th><th>{ "optimizer states" }</th>
                        <th>{ "saved activations" }</th>
                        if checkpointing { <th>{ "kept (checkpoint)" }</th> }
                    </tr></thead>
                    <tbody>{ for rows }</tbody>
                </table>
            }
        </section>
    }
}
