//! The student: family, width and depth multipliers, input size.
use estimator_wasm::explorer::FormField;
use yew::prelude::*;

use super::choice_field::ChoiceField;
use super::number_field::NumberField;
use super::{FormProps, Options};
use crate::field::word_of;

#[component]
pub fn StudentForm(props: &FormProps) -> Html {
    let (s, onset) = (&props.state, &props.onset);
    let form = &s.form;
    let error = |f: FormField| props.errors.get(&f).cloned();
    let families: Vec<_> = match form.scenario() {
        Some(sc) => sc.families.to_vec(),
        None => vec![form.family],
    };
    let options: Options =
        families.iter().map(|f| (AttrValue::from(word_of(f)), AttrValue::from(word_of(f)))).collect();
    let input_unit = match form.scenario().map(|sc| sc.input) {
        Some(estimator_wasm::explorer::InputKind::Tokens) => "tokens (sequence length); the teacher reads it too",
        Some(estimator_wasm::explorer::InputKind::Image) => "pixels (image height); the teacher reads it too",
        _ => "image height, sequence length or features; the teacher reads it too",
    };
    html! {
        <fieldset class="student">
            <legend>{ "Student" }</legend>
            <ChoiceField field={FormField::Family} label="family" {options} selected={word_of(&form.family)}
                         error={error(FormField::Family)} onset={onset.clone()} />
            <NumberField field={FormField::Width} label="width multiplier" unit="x the base student's widths"
                         value={s.text(FormField::Width)}
                         error={error(FormField::Width)} onset={onset.clone()} />
            <NumberField field={FormField::Depth} label="depth multiplier" unit="x its blocks or layers"
                         value={s.text(FormField::Depth)}
                         error={error(FormField::Depth)} onset={onset.clone()} />
            <NumberField field={FormField::Input} label="input size" unit={input_unit}
                         value={s.text(FormField::Input)}
                         error={error(FormField::Input)} onset={onset.clone()} />
        </fieldset>
    }
}
