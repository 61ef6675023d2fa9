//! The largest micro-batch of the chosen student on every catalogue GPU (at most the training
//! set); a GPU's name picks it.
use std::rc::Rc;

use estimator_wasm::explorer::sweep::Sweep;
use estimator_wasm::explorer::FormField;
use yew::prelude::*;

use super::bytes::Bytes;
use super::max_batch_cell::{cap_note, max_batch_cell};

#[derive(Properties, PartialEq)]
pub struct GpuTableProps {
    pub sweep: Rc<Sweep>,
    pub onset: Callback<(FormField, String)>,
}

#[component]
pub fn GpuTable(props: &GpuTableProps) -> Html {
    let s = &props.sweep;
    let rows = s.gpus.iter().enumerate().map(|(i, row)| {
        let name = row.gpu;
        let onclick = props.onset.reform(move |_: MouseEvent| (FormField::Gpu, name.to_string()));
        html! {
            <tr key={name} class={classes!((name == s.gpu).then_some("chosen"), row.max_batch.is_none().then_some("over"))}>
                <td><button type="button" class="link" {onclick}>{ name }</button></td>
                <td><Bytes value={row.memory} k={format!("gpus.{i}.memory")} /></td>
                { max_batch_cell(row.max_batch, s.train_samples, format!("gpus.{i}.max_batch"), "does not fit") }
            </tr>
        }
    });
    html! {
        <table class="figures" id="gpu-table">
            <caption>{ "Largest micro-batch of the chosen student on each GPU (safety margin kept free" }{ cap_note(s) }{ ")" }</caption>
            <thead><tr><th>{ "GPU" }</th><th>{ "memory" }</th><th>{ "largest micro-batch" }</th></tr></thead>
            <tbody>{ for rows }</tbody>
        </table>
    }
}
