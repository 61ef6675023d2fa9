//! Pasting a cfg.toml fills the form.
use web_sys::HtmlTextAreaElement;
use yew::prelude::*;

#[derive(Properties, PartialEq)]
pub struct CfgPasteProps {
    pub text: AttrValue,
    pub error: Option<String>,
    /// What the page's link does with this file when it is long (`query::link_note`).
    pub note: Option<String>,
    pub onedit: Callback<String>,
    pub onload: Callback<()>,
}

#[component]
pub fn CfgPaste(props: &CfgPasteProps) -> Html {
    let oninput = props.onedit.reform(|e: InputEvent| e.target_unchecked_into::<HtmlTextAreaElement>().value());
    let onclick = props.onload.reform(|_: MouseEvent| ());
    html! {
        <details class="paste" open={props.error.is_some() || props.note.is_some()}>
            <summary>{ "Paste a cfg.toml" }</summary>
            <textarea id="paste" rows="8" spellcheck="false" placeholder="[data]\ninput_shape = [1, 28, 28]\n..."
                      value={props.text.clone()} {oninput} />
            <button id="paste-load" type="button" {onclick}>{ "Fill the form" }</button>
            if let Some(message) = &props.error {
                <p class="field-error" id="e-cfg" role="alert">{ message }</p>
            }
            if let Some(note) = &props.note {
                <p class="hint" id="cfg-link-note">{ note }</p>
            }
        </details>
    }
}
