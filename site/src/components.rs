//! The page's components, one per file under `src/components/`. Props go down, `Callback`s
//! go up; none computes a figure (they display the estimator's bytes).
pub mod app;
pub mod batch_curve;
pub mod bytes;
pub mod cfg_export;
pub mod cfg_paste;
pub mod choice_field;
pub mod gpu_table;
pub mod layer_table;
pub mod levers;
pub mod max_batch_cell;
pub mod number_field;
pub mod parallel_form;
pub mod size_bars;
pub mod size_table;
pub mod student_form;
pub mod summary;
pub mod teacher_picker;
pub mod training_form;

use std::collections::BTreeMap;
use std::rc::Rc;

use estimator_wasm::explorer::FormField;
use yew::Callback;

use crate::state::State;

/// What every form section receives: the state, the inline message per field, and the
/// callback that sets a field from text.
#[derive(Clone, PartialEq, yew::Properties)]
pub struct FormProps {
    pub state: Rc<State>,
    pub errors: Rc<BTreeMap<FormField, String>>,
    pub onset: Callback<(FormField, String)>,
}

/// `(value, label)` options of a select.
pub type Options = Vec<(yew::AttrValue, yew::AttrValue)>;

/// Options from static `(value, label)` pairs.
pub fn options(pairs: &[(&'static str, &'static str)]) -> Options {
    pairs.iter().map(|&(v, l)| (yew::AttrValue::Static(v), yew::AttrValue::Static(l))).collect()
}
