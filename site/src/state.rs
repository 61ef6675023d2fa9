//! The page's state and its reducer: the form (`ExplorerForm`, what the URL holds), the text of
//! each number input as typed, inline messages, and the cfg.toml paste box. Pure: no web-sys,
//! so `cargo test` covers it natively.
use std::collections::BTreeMap;
use std::rc::Rc;

use estimator_wasm::explorer::{ExplorerForm, FormField, CUSTOM};
use yew::Reducible;

use crate::field::Input;
use crate::query;

/// A user intent.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// An input's new text (numbers as typed, or a select's option value).
    Set(FormField, String),
    /// The paste box's text.
    EditPaste(String),
    /// Fill the form from the paste box.
    LoadPaste,
    /// Show or hide the per-layer table.
    ToggleLayers,
}

/// Everything the page remembers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct State {
    /// The last form whose every field is in range (what is priced and put in the URL).
    pub form: ExplorerForm,
    /// Number inputs as typed, so "0." or "-" stay on screen while being edited.
    pub texts: BTreeMap<FormField, String>,
    /// Inline messages of inputs whose text is not a valid value (the form keeps the old one).
    pub errors: BTreeMap<FormField, String>,
    /// The cfg.toml paste box.
    pub paste: String,
    pub paste_error: Option<String>,
    pub show_layers: bool,
}

impl State {
    /// The state a URL query describes: its form, its pasted cfg.toml in the paste box, and
    /// each value it holds that could not be read shown at its input, as if typed.
    pub fn from_query(search: &str) -> State {
        State::from_url(search, "")
    }

    /// [`State::from_query`] for a URL's query and fragment (`query::from_url`).
    pub fn from_url(search: &str, fragment: &str) -> State {
        let link = query::from_url(search, fragment);
        let mut s = State { paste: link.form.cfg.clone().unwrap_or_default(), form: link.form, ..State::default() };
        for (field, text, message) in link.bad {
            if field.is_number() {
                s.texts.insert(field, text);
            }
            s.errors.insert(field, message);
        }
        s
    }

    /// The text an input shows: as typed, else the form's value ([`FormField::text`]).
    pub fn text(&self, field: FormField) -> String {
        self.texts.get(&field).cloned().unwrap_or_else(|| field.text(&self.form))
    }

    fn set(&mut self, field: FormField, text: String) {
        if field.is_number() {
            self.texts.insert(field, text.clone());
        }
        let applied = apply(&self.form, field, text.trim()).and_then(|form| match form.check() {
            Err(e) if e.field == Some(field) => Err(e.message),
            _ => Ok(form),
        });
        match applied {
            Ok(form) => {
                if field == FormField::Teacher {
                    self.texts.clear();
                    self.errors.clear();
                }
                self.errors.remove(&field);
                self.form = form;
            }
            Err(message) => {
                self.errors.insert(field, message);
            }
        }
    }
}

impl Reducible for State {
    type Action = Action;

    fn reduce(self: Rc<Self>, action: Action) -> Rc<Self> {
        let mut s = (*self).clone();
        match action {
            Action::Set(field, text) => {
                s.set(field, text);
            }
            Action::EditPaste(text) => s.paste = text,
            Action::LoadPaste => match ExplorerForm::from_cfg(&s.paste, &s.form.gpu) {
                Ok(form) => {
                    s.form = form;
                    s.texts.clear();
                    s.errors.clear();
                    s.paste_error = None;
                }
                Err(e) => s.paste_error = Some(e.message),
            },
            Action::ToggleLayers => s.show_layers = !s.show_layers,
        }
        Rc::new(s)
    }
}

/// `form` with `field` set from `text`, or the message to show beside the input.
fn apply(form: &ExplorerForm, field: FormField, text: &str) -> Result<ExplorerForm, String> {
    match field {
        FormField::Teacher if text == CUSTOM => Ok(form.clone()),
        FormField::Teacher => form.with_teacher(text).map_err(|e| e.message),
        _ => {
            let mut f = form.clone();
            field.set(&mut f, text)?;
            Ok(f)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use estimator_wasm::schema::{Family, Precision};

    fn after(actions: Vec<Action>) -> State {
        actions.into_iter().fold(Rc::new(State::default()), |s, a| s.reduce(a)).as_ref().clone()
    }

    #[test]
    fn numbers_update_the_form() {
        let s = after(vec![Action::Set(FormField::Batch, "16".into()), Action::Set(FormField::Width, "0.5".into())]);
        assert_eq!((s.form.batch, s.form.width), (16, 0.5));
        assert!(s.errors.is_empty());
        assert_eq!(s.text(FormField::Width), "0.5");
    }

    #[test]
    fn bad_numbers_keep_the_last_valid_form_and_say_why() {
        for (field, text, message) in [
            (FormField::Batch, "", "enter a whole number"),
            (FormField::Batch, "-4", "must be positive"),
            (FormField::Batch, "0", "micro-batch must be between 1"),
            (FormField::Batch, "99999999999999999999999", "not a whole number"),
            (FormField::Width, "abc", "not a number"),
            (FormField::Width, "0", "width multiplier must be between 0.01 and 64"),
            (FormField::Width, "1e-300", "width multiplier must be between 0.01 and 64"),
            (FormField::Width, "1e9", "and 64"),
            (FormField::Sparsity, "1.5", "sparsity must be a fraction"),
            (FormField::Input, "0", "input size must be between"),
            (FormField::ZeroStage, "7", "ZeRO stage"),
        ] {
            let s = after(vec![Action::Set(field, text.into())]);
            assert_eq!(s.form, ExplorerForm::default(), "{field:?} {text}");
            let got = s.errors.get(&field).unwrap_or_else(|| panic!("{field:?} {text}: no message"));
            assert!(got.contains(message), "{field:?} {text}: {got}");
            let shown =
                if field == FormField::Batch { text.to_string() } else { ExplorerForm::default().batch.to_string() };
            assert_eq!(s.text(FormField::Batch), shown);
        }
        // a later valid value clears the message
        let s = after(vec![Action::Set(FormField::Batch, "-1".into()), Action::Set(FormField::Batch, "2".into())]);
        assert!(s.errors.is_empty());
        assert_eq!(s.form.batch, 2);
    }

    #[test]
    fn switching_teacher_takes_its_defaults_and_keeps_the_gpu() {
        let s = after(vec![
            Action::Set(FormField::Gpu, "H200".into()),
            Action::Set(FormField::Batch, "x".into()),
            Action::Set(FormField::Teacher, "fashion-mnist-cnn".into()),
        ]);
        assert_eq!((s.form.family, s.form.input, s.form.batch), (Family::Cnn, 28, 128));
        assert_eq!(s.form.gpu, "H200");
        assert!(s.errors.is_empty() && s.texts.is_empty());
        let s =
            after(vec![Action::Set(FormField::Precision, "fp16".into()), Action::Set(FormField::Family, "cnn".into())]);
        assert_eq!((s.form.precision, s.form.family), (Precision::Fp16, Family::Cnn));
    }

    #[test]
    fn pasting_a_cfg_fills_the_form() {
        let text = "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[teacher]\npreset = \"fashion-mnist-cnn\"\n\
                    [student]\nfamily = \"mlp\"\nhidden = [64]\n[train]\nbatch_size = 7\n";
        let s = after(vec![Action::EditPaste(text.into()), Action::LoadPaste]);
        assert_eq!((s.form.teacher.as_str(), s.form.batch, s.form.family), (CUSTOM, 7, Family::Mlp));
        assert_eq!(s.paste_error, None);
        let s = after(vec![Action::EditPaste("[data]\nbad".into()), Action::LoadPaste]);
        assert!(s.paste_error.unwrap().contains("line"), "TOML errors give the line");
        assert_eq!(s.form, ExplorerForm::default());
    }

    #[test]
    fn a_links_bad_value_is_shown_at_its_input_and_the_rest_is_kept() {
        let s = State::from_query("?batch=lots&gpu=T4");
        assert_eq!(s.form, ExplorerForm { gpu: "T4".into(), ..ExplorerForm::opening() });
        assert_eq!(s.text(FormField::Batch), "lots");
        assert_eq!(
            s.errors.get(&FormField::Batch).map(String::as_str),
            Some("\"lots\" is not a whole number from 1 to 1,099,511,627,776")
        );
        assert_eq!(State::from_query("?batch=5").form.batch, 5);
        let s = State::from_query("?teacher=custom&cfg=%5Bdata%5D");
        assert_eq!(s.paste, "[data]", "a link's cfg.toml fills the paste box");
        let s = State::from_url("?teacher=custom", "#cfg=%5Bdata%5D");
        assert_eq!(s.paste, "[data]", "so does one in its fragment");
        // a select's value that is not one of its names is marked, never dropped silently
        let s = State::from_query("?optimizer=lion&prune=random");
        assert_eq!(
            s.errors.get(&FormField::Optimizer).map(String::as_str).unwrap_or("").get(..23),
            Some("unknown variant `lion`,")
        );
        assert!(s.errors.get(&FormField::Prune).is_some_and(|e| e.contains("`random`")));
    }
}
