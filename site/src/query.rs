//! The form as a URL query (`?teacher=gpt2&batch=8&...`), so that a link reproduces a view.
//! Each key holds what its input shows ([`FormField::text`]); `cfg` holds a pasted cfg.toml.
use estimator_wasm::explorer::{ExplorerForm, FormField, CUSTOM};

use crate::field::Input;

/// The query string of `form`, without the leading `?`: every field, then `cfg` for a
/// pasted cfg.toml.
pub fn to_query(form: &ExplorerForm) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for field in FormField::ALL {
        query.append_pair(field.key(), &field.text(form));
    }
    if let Some(cfg) = form.cfg.as_ref().filter(|_| form.teacher == CUSTOM) {
        query.append_pair("cfg", cfg);
    }
    query.finish()
}

/// What a link holds: the form, and each value that could not be read, as the page shows a
/// bad input: its field, its text and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub form: ExplorerForm,
    pub bad: Vec<(FormField, String, String)>,
}

/// The form in a query string (with or without the leading `?`). Keys left out take the
/// values of the link's teacher (its scenario's defaults, or the fields of its `cfg`); keys
/// the form does not have are ignored; the last of repeated keys wins.
pub fn from_query(query: &str) -> Link {
    let query = query.strip_prefix('?').unwrap_or(query);
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
    let last = |key: &str| pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let start = ExplorerForm::default();
    let mut form = match (last("teacher"), last("cfg")) {
        (Some(CUSTOM), Some(cfg)) => ExplorerForm::from_cfg(cfg, &start.gpu).unwrap_or_else(|_| ExplorerForm {
            teacher: CUSTOM.into(),
            cfg: Some(cfg.into()),
            ..start
        }),
        (Some(teacher), _) => start.with_teacher(teacher).unwrap_or(start),
        (None, _) => start,
    };
    let mut bad = Vec::new();
    for (key, value) in &pairs {
        if let Some(field) = FormField::from_key(key) {
            if let Err(e) = field.set(&mut form, value) {
                bad.retain(|(f, _, _)| *f != field);
                bad.push((field, value.clone(), e));
            }
        }
    }
    Link { form, bad }
}

#[cfg(test)]
mod tests {
    use super::*;
    use estimator_wasm::schema::{Family, Precision};

    #[test]
    fn a_form_survives_the_round_trip() {
        let form = ExplorerForm {
            width: 0.5,
            precision: Precision::Fp16,
            checkpointing: "sqrt".into(),
            ..ExplorerForm::default()
        };
        let q = to_query(&form);
        assert!(q.contains("width=0.5") && q.contains("precision=fp16"), "{q}");
        assert_eq!(from_query(&format!("?{q}")), Link { form, bad: vec![] });
    }

    #[test]
    fn a_pasted_cfg_travels_in_the_query() {
        let text = "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[teacher]\npreset = \"fashion-mnist-cnn\"\n\
                    [student]\nfamily = \"mlp\"\nhidden = [64]\n";
        let form = ExplorerForm::from_cfg(text, "T4").unwrap();
        let back = from_query(&to_query(&form)).form;
        assert_eq!(back, form);
        assert_eq!(back.family, Family::Mlp);
        // the cfg alone: the missing keys are the file's, not the default scenario's
        let alone = form_urlencoded::Serializer::new(String::new())
            .append_pair("teacher", CUSTOM)
            .append_pair("cfg", text)
            .finish();
        assert_eq!(from_query(&alone).form, ExplorerForm::from_cfg(text, &ExplorerForm::default().gpu).unwrap());
        // a cfg is written only for a pasted teacher
        let stale = ExplorerForm { cfg: Some(text.into()), ..ExplorerForm::default() };
        assert!(!to_query(&stale).contains("cfg="));
    }

    #[test]
    fn missing_keys_take_the_teachers_defaults_and_bad_values_are_kept_aside() {
        assert_eq!(from_query("batch=3").form.batch, 3);
        assert_eq!(from_query("batch=3").form.teacher, ExplorerForm::default().teacher);
        assert_eq!(from_query(""), Link { form: ExplorerForm::default(), bad: vec![] });
        assert_eq!(from_query("?batch=3&utm_source=x&batch=5").form.batch, 5, "unknown keys ignored, last wins");
        let cnn = from_query("teacher=fashion-mnist-cnn").form;
        assert_eq!(cnn, ExplorerForm::default().with_teacher("fashion-mnist-cnn").unwrap());
        // one bad value spoils only its own key
        let link = from_query("gpu=T4&batch=-3&width=abc&precision=fp32");
        assert_eq!((link.form.gpu.as_str(), link.form.precision), ("T4", Precision::Fp32));
        assert_eq!(link.form.batch, ExplorerForm::default().batch);
        let fields: Vec<_> = link.bad.iter().map(|(f, text, _)| (*f, text.as_str())).collect();
        assert_eq!(fields, [(FormField::Batch, "-3"), (FormField::Width, "abc")]);
        assert_eq!(link.bad[0].2, "must be positive");
    }
}
