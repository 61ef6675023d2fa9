//! The page: the form on the left, the estimator's views on the right. Owns the reducer; the
//! sweep is memoised on the form (`use_sweep`), the URL follows the form (`use_url_sync`).
use std::collections::BTreeMap;
use std::rc::Rc;

use estimator_wasm::explorer::FormField;
use yew::prelude::*;

use super::batch_curve::BatchCurve;
use super::cfg_export::CfgExport;
use super::cfg_paste::CfgPaste;
use super::gpu_table::GpuTable;
use super::layer_table::LayerTable;
use super::levers::Levers;
use super::parallel_form::ParallelForm;
use super::size_bars::SizeBars;
use super::size_table::SizeTable;
use super::student_form::StudentForm;
use super::summary::Summary;
use super::teacher_picker::TeacherPicker;
use super::training_form::TrainingForm;
use crate::hooks::{linked_fragment, use_first_numbers, use_sweep, use_url_sync};
use crate::state::{Action, State};
use crate::{dom, query};

/// Id of the page's main element (it carries `data-query` and `data-fragment` (the form as the
/// URL query and fragment it is written to), `data-sweep-ms` and `data-first-numbers-ms` for the end-to-end test).
pub const MAIN_ID: &str = "explorer";

#[component]
pub fn App() -> Html {
    let state = use_reducer(|| State::from_url(&dom::location_search(), &dom::location_hash()));
    use_url_sync(&state.form);
    let priced = use_sweep(&state.form);
    use_first_numbers(MAIN_ID);

    let dispatch = |make: fn(String) -> Action| {
        let state = state.clone();
        Callback::from(move |text: String| state.dispatch(make(text)))
    };
    let onset = {
        let state = state.clone();
        Callback::from(move |(field, text): (FormField, String)| state.dispatch(Action::Set(field, text)))
    };
    let onload = {
        let state = state.clone();
        Callback::from(move |()| state.dispatch(Action::LoadPaste))
    };
    let ontoggle = {
        let state = state.clone();
        Callback::from(move |()| state.dispatch(Action::ToggleLayers))
    };

    // inline messages: the inputs' own, then the estimator's on the field that sets its key
    let mut errors: BTreeMap<FormField, String> = state.errors.clone();
    let mut general = None;
    let mut paste_error = state.paste_error.clone();
    if let Err(e) = &priced.sweep {
        match e.field {
            Some(FormField::Cfg) => paste_error = paste_error.or_else(|| Some(e.message.clone())),
            Some(f) => {
                errors.entry(f).or_insert_with(|| e.message.clone());
            }
            None => general = Some(e.message.clone()),
        }
    }
    let form_props =
        super::FormProps { state: Rc::new((*state).clone()), errors: Rc::new(errors), onset: onset.clone() };

    let views = match &priced.sweep {
        Ok(sweep) => html! {
            <>
                <Summary sweep={sweep.clone()} />
                <SizeBars sweep={sweep.clone()} onset={onset.clone()} />
                <SizeTable sweep={sweep.clone()} />
                <BatchCurve sweep={sweep.clone()} />
                <GpuTable sweep={sweep.clone()} onset={onset.clone()} />
                <Levers sweep={sweep.clone()} />
                <LayerTable sweep={sweep.clone()} open={state.show_layers} {ontoggle} />
                if let Some(text) = &priced.cfg_toml {
                    <CfgExport text={text.clone()} untrainable={sweep.untrainable.clone().map(AttrValue::from)}
                        folder={sweep.folder} />
                }
            </>
        },
        Err(e) => html! {
            <p class="error" id="estimate-error" role="alert">
                { "This configuration cannot be priced: " }{ general.clone().unwrap_or_else(|| e.message.clone()) }
            </p>
        },
    };
    let onsubmit = Callback::from(|e: SubmitEvent| e.prevent_default());
    let fragment = linked_fragment(&state.form);
    let link_note = query::link_note(query::to_fragment(&state.form).len());
    html! {
        <>
            <header>
                <h1>{ "distill explorer" }</h1>
                <p>{ "Describe a teacher and a family of students: see which student sizes fit which GPU, where the \
                      memory goes, and what each lever buys. Every figure comes from the same estimator as " }
                   <code>{ "distill plan" }</code>{ ", running in this page." }</p>
            </header>
            <main id={MAIN_ID} data-query={query::to_query(&state.form)} data-fragment={fragment}
                  data-sweep-ms={format!("{:.3}", priced.millis)}>
                <form class="inputs" {onsubmit}>
                    <TeacherPicker ..form_props.clone() />
                    <CfgPaste text={AttrValue::from(state.paste.clone())} error={paste_error} note={link_note}
                              onedit={dispatch(Action::EditPaste)} {onload} />
                    <StudentForm ..form_props.clone() />
                    <TrainingForm ..form_props.clone() />
                    <ParallelForm ..form_props />
                </form>
                <div class="views">{ views }</div>
            </main>
            <footer>
                <a href="docs/memory-model.html">{ "How the estimate works" }</a>
                { " · figures are bytes per GPU; hover a figure for its exact bytes · the link keeps every setting" }
            </footer>
        </>
    }
}
