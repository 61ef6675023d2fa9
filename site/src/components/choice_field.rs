//! A labelled select with an inline message.
use estimator_wasm::explorer::FormField;
use estimator_wasm::schema::names::short;
use web_sys::HtmlSelectElement;
use yew::prelude::*;

use super::Options;

#[derive(Properties, PartialEq)]
pub struct ChoiceFieldProps {
    pub field: FormField,
    pub label: AttrValue,
    pub options: Options,
    /// The selected option's value.
    pub selected: String,
    #[prop_or_default]
    pub error: Option<String>,
    pub onset: Callback<(FormField, String)>,
}

#[component]
pub fn ChoiceField(props: &ChoiceFieldProps) -> Html {
    let field = props.field;
    let onchange = props.onset.reform(move |e: Event| (field, e.target_unchecked_into::<HtmlSelectElement>().value()));
    let id = format!("f-{}", field.key());
    // a value that is not among the options (from a link) is shown as it is (a short prefix
    // of a long one), not as another
    let mut options = props.options.clone();
    if !options.iter().any(|(v, _)| v.as_str() == props.selected) {
        let label = AttrValue::from(short(&props.selected));
        options.push((AttrValue::from(props.selected.clone()), label));
    }
    html! {
        <div class={classes!("field", props.error.as_ref().map(|_| "invalid"))}>
            <label for={id.clone()}>{ &props.label }</label>
            <select id={id} name={field.key()} {onchange}>
                // keyed by value and selectedness: a changed selection inserts fresh options, so the
                // `selected` attribute applies even after the user has touched the select
                { for options.iter().map(|(value, label)| {
                    let selected = value.as_str() == props.selected;
                    html! {
                        <option key={format!("{value}:{selected}")} value={value.clone()} {selected}>{ label.clone() }</option>
                    }
                }) }
            </select>
            if let Some(message) = &props.error {
                <p class="field-error" id={format!("e-{}", field.key())} role="alert">{ message }</p>
            }
        </div>
    }
}
