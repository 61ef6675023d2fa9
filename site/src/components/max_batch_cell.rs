//! A table cell holding a largest micro-batch: memory's answer at most the scenario's training
//! set ([`within_data`]), said so where the set is the limit, so every table caps it as the
//! summary does. A plain function, not a component: the page's wasm has little room to spare.
use estimator_wasm::explorer::sweep::{within_data, Sweep};
use yew::prelude::*;

use crate::format;

/// The cell of memory's largest micro-batch `batch` (`None`: not even 1 fits) under a training
/// set of `train_samples` where known, its figure's path in the sweep JSON `k` (e.g.
/// `gpus.3.max_batch`) in `data-k`, the batch shown in `data-batch`, and `none` as its text
/// when nothing fits.
pub fn max_batch_cell(batch: Option<u64>, train_samples: Option<u64>, k: String, none: &str) -> Html {
    let capped = within_data(batch, train_samples);
    html! {
        <td class="max-batch" data-k={k} data-batch={capped.map(|b| b.to_string()).unwrap_or_default()}>
            { text(batch, train_samples, none) }
        </td>
    }
}

/// The cell's text: the batch grouped by thousands, "N (whole set)" where the training set caps
/// it, `none` without one.
pub fn text(batch: Option<u64>, train_samples: Option<u64>, none: &str) -> String {
    match (batch, train_samples) {
        (None, _) => none.to_string(),
        (Some(b), Some(n)) if b >= n => format!("{} (whole set)", format::grouped(n)),
        (Some(b), _) => format::grouped(b),
    }
}

/// The caption's note on the cap, for `sweep`: empty without a known training set (whose size
/// the summary gives).
pub fn cap_note(sweep: &Sweep) -> &'static str {
    if sweep.train_samples.is_some() {
        "; at most the training set"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::text;

    #[test]
    fn a_batch_past_the_training_set_reads_as_the_whole_set() {
        // the opening scenario: memory allows 104,656 on an RTX-4090, the set holds 60,000
        assert_eq!(text(Some(104_656), Some(60_000), "does not fit"), "60,000 (whole set)");
        assert_eq!(text(Some(60_000), Some(60_000), "-"), "60,000 (whole set)");
        assert_eq!(text(Some(59_999), Some(60_000), "-"), "59,999");
        assert_eq!(text(Some(104_656), None, "-"), "104,656");
        assert_eq!(text(None, Some(60_000), "does not fit"), "does not fit");
    }
}
