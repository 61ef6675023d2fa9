//! The bars' figures as a table: one column per student size, one row per group.
use std::rc::Rc;

use estimator_wasm::explorer::sweep::{Sweep, GROUPS};
use yew::prelude::*;

use super::bytes::Bytes;
use super::max_batch_cell::max_batch_cell;
use crate::format;

#[derive(Properties, PartialEq)]
pub struct SizeTableProps {
    pub sweep: Rc<Sweep>,
}

#[component]
pub fn SizeTable(props: &SizeTableProps) -> Html {
    let s = &props.sweep;
    let cell = |i: usize, key: &'static str, value: Option<u64>| match value {
        Some(v) => html! { <td><Bytes value={v} k={format!("students.{i}.breakdown.{key}")} /></td> },
        None => html! { <td class="na" title={s.students[i].error.clone().unwrap_or_default()}>{ "n/a" }</td> },
    };
    // a zero gradient means the column's peak comes before the backward: say so where it shows
    let no_gradients = s.students.iter().any(|st| st.breakdown.is_some_and(|b| b.gradients == 0 && b.total > 0));
    let row = |key: &'static str, name: &'static str| {
        html! {
            <tr>
                <th scope="row"><i class={format!("g-{key}")}></i>{ name }
                    if key == "gradients" && no_gradients {
                        <small class="why" id="no-gradients">{ " (0: the peak comes before the backward, when none exist)" }</small>
                    }
                </th>
                { for s.students.iter().enumerate().map(|(i, st)| cell(i, key, st.breakdown.map(|b| value(&b, key)))) }
            </tr>
        }
    };
    html! {
        <>
        <table class="figures" id="size-table">
            <thead>
                <tr>
                    <th>{ "student width" }</th>
                    { for s.students.iter().enumerate().map(|(i, st)| html! {
                        <th class={classes!((i == s.chosen).then_some("chosen"))}>
                            { format!("x{} ({})", format::number(st.width), st.params.map(format::params).unwrap_or_default()) }
                        </th>
                    }) }
                </tr>
            </thead>
            <tbody>
                { for GROUPS.iter().map(|(key, name)| row(key, name)) }
                { row("total", "total") }
                <tr>
                    <th scope="row">{ "largest micro-batch" }</th>
                    { for s.students.iter().enumerate().map(|(i, st)| html! {
                        { max_batch_cell(st.max_batch, s.train_samples, format!("students.{i}.max_batch"), "-") }
                    }) }
                </tr>
            </tbody>
        </table>
        <p class="hint">{ format!("Each column is its student's peak moment ({} for the chosen one). At the forward \
            end no gradient exists yet (distill frees them between steps); at the optimizer step all of them do.",
            crate::field::word_of(&s.plan.peak_moment).replace('_', " ")) }</p>
        </>
    }
}

fn value(b: &estimator_wasm::explorer::sweep::Breakdown, key: &str) -> u64 {
    if key == "total" {
        return b.total;
    }
    b.groups().iter().find(|(k, _)| *k == key).map_or(0, |(_, v)| *v)
}
