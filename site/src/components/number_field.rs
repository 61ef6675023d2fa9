//! A labelled text input for a number, with its unit and an inline message.
use estimator_wasm::explorer::FormField;
use web_sys::HtmlInputElement;
use yew::prelude::*;

#[derive(Properties, PartialEq)]
pub struct NumberFieldProps {
    pub field: FormField,
    pub label: AttrValue,
    /// Unit or range shown after the input.
    pub unit: AttrValue,
    /// The text as typed, or the form's value.
    pub value: String,
    pub error: Option<String>,
    pub onset: Callback<(FormField, String)>,
}

#[component]
pub fn NumberField(props: &NumberFieldProps) -> Html {
    let field = props.field;
    let oninput =
        props.onset.reform(move |e: InputEvent| (field, e.target_unchecked_into::<HtmlInputElement>().value()));
    let id = format!("f-{}", field.key());
    html! {
        <div class={classes!("field", props.error.as_ref().map(|_| "invalid"))}>
            <label for={id.clone()}>{ &props.label }</label>
            <input id={id} name={field.key()} type="text" inputmode="decimal" autocomplete="off"
                   value={props.value.clone()} {oninput} aria-invalid={props.error.is_some().to_string()} />
            <span class="unit">{ &props.unit }</span>
            if let Some(message) = &props.error {
                <p class="field-error" id={format!("e-{}", field.key())} role="alert">{ message }</p>
            }
        </div>
    }
}
