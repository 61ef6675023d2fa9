//! One paragraph on the chosen student: size, total at the micro-batch, fit, largest batch (at
//! most the scenario's training set, said so), and the estimator's notes.
use std::rc::Rc;

use estimator_wasm::explorer::sweep::Sweep;
use yew::prelude::*;

use super::bytes::Bytes;
use crate::format;

#[derive(Properties, PartialEq)]
pub struct SummaryProps {
    pub sweep: Rc<Sweep>,
}

#[component]
pub fn Summary(props: &SummaryProps) -> Html {
    let s = &props.sweep;
    let plan = &s.plan;
    let fit = plan.fit.as_ref();
    let gathered = plan.peak.get(estimator_wasm::Cat::ZeroGather);
    // no run cuts a batch larger than its training set
    let largest = s.within_data(s.max_batch);
    html! {
        <section class="summary" id="summary">
            <p>
                { format!("The chosen student has {} parameters (teacher {}). At a micro-batch of {} it needs ",
                          format::params(plan.params.student), format::params(plan.params.teacher), s.batch) }
                <strong><Bytes value={plan.totals.total} k="plan.totals.total" /></strong>
                { " of the " }{ s.gpu }{ "'s " }<Bytes value={s.capacity} k="capacity" />{ ": " }
                if let Some(f) = fit {
                    if f.fits {
                        <span class="fits">{ "fits, " }<Bytes value={f.free} k="plan.fit.free" />{ " free" }</span>
                    } else {
                        <span class="short">{ "does not fit, " }<Bytes value={f.short} k="plan.fit.short" />{ " short" }</span>
                    }
                }
                { ". Largest micro-batch: " }
                <strong id="max-batch" data-k="max_batch" data-batch={largest.map(|b| b.to_string()).unwrap_or_default()}>
                    { largest.map_or("none (not even 1 fits)".to_string(), format::grouped) }
                </strong>
                if let (Some(_), Some(m)) = (s.train_samples, s.max_batch.filter(|&m| Some(m) > largest)) {
                    <span id="max-batch-data">{ format!(", the whole training set (memory alone would allow {}, keeping {} free).",
                        format::grouped(m), pct(s.capacity - s.budget, s.capacity)) }</span>
                } else {
                    { format!(" (keeping {} free).", pct(s.capacity - s.budget, s.capacity)) }
                }
                { format!(" The peak is at the {} moment.", moment(&plan.peak_moment)) }
            </p>
            if gathered > 0 {
                <p class="hint" id="zero-gather">
                    { "Of the weights, " }<Bytes value={gathered} k="plan.peak.zero_gather" />
                    { " is ZeRO-3's gathered working set: the largest layer held whole three times (its weights for the \
                       layer being computed and again for the next one, prefetched; its gradient until the \
                       reduce-scatter), in the weights' stored dtype. It does not shrink with more GPUs." }
                </p>
            }
            if !plan.notes.is_empty() {
                <ul class="notes">{ for plan.notes.iter().map(|n| html! { <li>{ n }</li> }) }</ul>
            }
        </section>
    }
}

fn pct(part: u64, whole: u64) -> String {
    format!("{:.0}%", part as f64 * 100.0 / whole.max(1) as f64)
}

fn moment(p: &estimator_wasm::Moment) -> String {
    crate::field::word_of(p).replace('_', " ")
}
