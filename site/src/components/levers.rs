//! What each lever changes for the chosen student: its device total and largest micro-batch
//! with one setting moved.
use std::rc::Rc;

use estimator_wasm::explorer::sweep::Sweep;
use yew::prelude::*;

use super::bytes::Bytes;

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
                    <td data-k={format!("levers.{i}.max_batch")} data-batch={l.max_batch.map(|b| b.to_string()).unwrap_or_default()}>
                        { l.max_batch.map_or("does not fit".to_string(), |b| b.to_string()) }
                    </td>
                } else {
                    <td colspan="3" class="na">{ l.error.clone().unwrap_or_default() }</td>
                }
            </tr>
        }
    });
    html! {
        <table class="figures" id="levers">
            <caption>{ "What each lever buys (the chosen student, one setting changed; ZeRO against DDP on the same GPUs)" }</caption>
            <thead><tr><th>{ "lever" }</th><th>{ "changed to" }</th><th>{ "total" }</th><th>{ "change" }</th><th>{ "largest micro-batch" }</th></tr></thead>
            <tbody>{ for rows }</tbody>
        </table>
    }
}
