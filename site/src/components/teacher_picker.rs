//! The teacher: a scenario (teacher, task and base student) or the pasted cfg.toml.
use estimator_wasm::explorer::{FormField, CUSTOM, SCENARIOS};
use yew::prelude::*;

use super::choice_field::ChoiceField;
use super::{FormProps, Options};

#[component]
pub fn TeacherPicker(props: &FormProps) -> Html {
    let form = &props.state.form;
    let mut options: Options =
        SCENARIOS.iter().map(|s| (AttrValue::Static(s.key), AttrValue::Static(s.name))).collect();
    if form.teacher == CUSTOM {
        options.push((AttrValue::Static(CUSTOM), AttrValue::Static("pasted cfg.toml")));
    }
    let description = form.scenario().map_or("the teacher, data and student of the pasted cfg.toml", |s| s.description);
    html! {
        <fieldset class="teacher">
            <legend>{ "Teacher" }</legend>
            <ChoiceField field={FormField::Teacher} label="teacher" {options} selected={form.teacher.clone()}
                         error={props.errors.get(&FormField::Teacher).cloned()} onset={props.onset.clone()} />
            <p class="hint">{ description }</p>
        </fieldset>
    }
}
