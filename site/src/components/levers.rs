//! What each lever changes for the chosen student: its device total and largest micro-batch
//! with one setting moved (the batch at most the training set).
use std::rc::Rc;

use estimator_wasm::explorer::sweep::Sweep;
use yew::prelude::*;

use super::bytes::Bytes;
use super::max_batch_cell::{cap_note, max_batch_cell};

#[derive(Properties, PartialEq)]
pub struct LeversProps {
    pub sweep: Rc<Sweep>,
}

#[component]
pub fn Levers(props: &LeversProps) -> Html {
    let s = &props.sweep;
    let rows = s.levers.iter().enumerate().map(|(i, l)| {
        let versus = l.versus.as_ref().map(|v| format!(" vs {v}"));
        let change = if l.saves > 0 {
            html! { <span class="saves">{ "saves " }<Bytes value={l.saves} k={format!("levers.{i}.saves")} />{ versus }</span> }
        } else if l.costs > 0 {
            html! { <span class="costs">{ "costs " }<Bytes value={l.costs} k={format!("levers.{i}.costs")} />{ versus }</span> }
        } else {
            html! { { "no change" } }
        };
        html! {
            <tr key={l.lever}>
                <td>{ l.lever.replace('_', " ") }</td>
                <td>{ &l.setting }</td>
                if let Some(total) = l.total {
                    <td><Bytes value={total} k={format!("levers.{i}.total")} /></td>
                    <td>{ change }</td>
                    { max_batch_cell(l.max_batch, s.train_samples, format!("levers.{i}.max_batch"), "does not fit") }
                } else {
                    <td colspan="3" class="na">{ l.error.clone().unwrap_or_default() }</td>
                }
            </tr>
        }
    });
    html! {
        <table class="figures" id="levers">
            <caption>{ "What each lever buys (the chosen student, one setting changed; ZeRO against DDP on the same GPUs" }{ cap_note(s) }{ ")" }</caption>
            <thead><tr><th>{ "lever" }</th><th>{ "changed to" }</th><th>{ "total" }</th><th>{ "change" }</th><th>{ "largest micro-batch" }</th></tr></thead>
            <tbody>{ for rows }</tbody>
        </table>
    }
}
