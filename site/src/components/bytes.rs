//! A byte figure: in the unit that fits on the page, the exact bytes on hover, and the figure's path in the
//! sweep (`data-k`) with its bytes (`data-bytes`) for the end-to-end test.
use yew::prelude::*;

use crate::format;

#[derive(Properties, PartialEq)]
pub struct BytesProps {
    /// Bytes.
    pub value: u64,
    /// Path of the figure in the sweep JSON, e.g. `students.2.breakdown.weights`.
    pub k: AttrValue,
}

#[component]
pub fn Bytes(props: &BytesProps) -> Html {
    html! {
        <span class="bytes" data-k={props.k.clone()} data-bytes={props.value.to_string()}
              title={format::exact(props.value)}>
            { format::bytes(props.value) }
        </span>
    }
}
