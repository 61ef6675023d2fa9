//! "Copy cfg.toml" and "Download cfg.toml": the chosen student's file, as `distill` reads it,
//! and whether `distill` trains it or what it cannot train yet; for a teacher read from a
//! Hugging Face folder, which folder and where to get it.
use estimator_wasm::explorer::TeacherFolder;
use yew::prelude::*;

use crate::dom;

#[derive(Properties, PartialEq)]
pub struct CfgExportProps {
    pub text: AttrValue,
    /// Why `distill` cannot train the file yet (`Sweep::untrainable`); `None` when it trains it.
    pub untrainable: Option<AttrValue>,
    /// The Hugging Face folder the file names as its teacher (`Sweep::folder`).
    #[prop_or_default]
    pub folder: Option<TeacherFolder>,
}

#[component]
pub fn CfgExport(props: &CfgExportProps) -> Html {
    let status = use_state(String::new);
    let copy = {
        let (text, status) = (props.text.clone(), status.clone());
        Callback::from(move |_: MouseEvent| {
            let status = status.clone();
            dom::copy(&text, move |ok| {
                status.set(if ok {
                    "copied".into()
                } else {
                    "the browser refused the clipboard: copy the cfg.toml below by hand".into()
                });
            });
        })
    };
    let download = {
        let (text, status) = (props.text.clone(), status.clone());
        Callback::from(move |_: MouseEvent| {
            status.set(if dom::download("cfg.toml", &text) {
                "downloaded cfg.toml".into()
            } else {
                "download failed".into()
            });
        })
    };
    // what trains the file where distill trains it: the Hugging Face folder it names, or a TorchScript teacher
    let folder = props.folder.filter(TeacherFolder::trains);
    let (note, train) = match folder {
        Some(f) => (
            format!(
                "distill trains this cfg.toml from your copy of {}'s Hugging Face folder, beside it as {}/, and your \
                 text as train.txt and test.txt.",
                f.repo, f.dir
            ),
            "distill --student cfg.toml",
        ),
        None => (
            "distill trains this cfg.toml (with its data files and a TorchScript teacher).".to_string(),
            "distill --teacher t.pt --student cfg.toml",
        ),
    };
    html! {
        <section class="export">
            <div class="buttons">
                <button id="copy-cfg" type="button" onclick={copy}>{ "Copy cfg.toml" }</button>
                <button id="download-cfg" type="button" onclick={download}>{ "Download cfg.toml" }</button>
                <span class="status" aria-live="polite">{ (*status).clone() }</span>
            </div>
            if let Some(why) = &props.untrainable {
                <p id="trainable" class="short" data-trainable="no">{ format!("{why}: plan with it, but train elsewhere.") }</p>
            } else {
                <p id="trainable" class="fits" data-trainable="yes" data-folder={folder.map(|f| AttrValue::Static(f.dir))}>{ note }</p>
            }
            // the next steps never contradict the line above: training only where distill trains the file
            if props.untrainable.is_some() {
                <p class="hint" id="next-steps">{ "Check it with " }<code>{ "distill plan --student cfg.toml" }</code>{ "." }</p>
            } else {
                <p class="hint" id="next-steps">
                    if let Some(f) = folder {
                        <>{ "Get the folder with " }<code>{ f.download() }</code>{ f.access() }{ ", check it with " }</>
                    } else {
                        { "Then check it with " }
                    }
                    <code>{ "distill plan --student cfg.toml" }</code>{ " and train with " }<code>{ train }</code>{ "." }</p>
            }
            <details>
                <summary>{ "cfg.toml" }</summary>
                <pre id="cfg-toml">{ props.text.clone() }</pre>
            </details>
        </section>
    }
}
