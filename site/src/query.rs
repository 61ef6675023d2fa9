//! The form as a URL (`?teacher=gpt2&batch=8&...#cfg=...`), so that a link reproduces a view.
//! Each query key holds what its input shows ([`FormField::text`]); a pasted cfg.toml goes in
//! the fragment (`#cfg=`), which the browser never sends to a server: a large file can then
//! never make the request line too long (HTTP 414). Links from before still carry `?cfg=`.
use estimator_wasm::explorer::{ExplorerForm, FormField, CUSTOM};

use crate::field::Input;
use crate::format;

/// Longest fragment a link carries, in characters: Chromium refuses URLs over 2 MiB
/// (2,097,152 characters), and the query needs a few hundred. A longer pasted cfg.toml is priced
/// but left out of the link, and the page says so ([`link_note`]).
pub const MAX_FRAGMENT: usize = 2_000_000;
/// A fragment longer than this gets a warning: chat apps, mail and some browsers cut links
/// this long.
pub const LONG_FRAGMENT: usize = 8_000;

/// The query string of `form`, without the leading `?`: every field (the pasted cfg.toml is
/// [`to_fragment`]'s).
pub fn to_query(form: &ExplorerForm) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for field in FormField::ALL {
        query.append_pair(field.key(), &field.text(form));
    }
    query.finish()
}

/// The fragment of `form`'s link, without the leading `#`: `cfg=<the pasted cfg.toml>` for a
/// pasted teacher, else empty.
pub fn to_fragment(form: &ExplorerForm) -> String {
    match form.cfg.as_ref().filter(|_| form.teacher == CUSTOM) {
        Some(cfg) => form_urlencoded::Serializer::new(String::new()).append_pair("cfg", cfg).finish(),
        None => String::new(),
    }
}

/// What the page says about a link whose fragment is `fragment` (characters): nothing for a
/// short one, a warning for a long one, and that the file is left out of a link it cannot fit.
pub fn link_note(fragment: usize) -> Option<String> {
    let kb = format::grouped(fragment.div_ceil(1000) as u64);
    if fragment > MAX_FRAGMENT {
        Some(format!(
            "This cfg.toml needs {kb} KB in a link, more than browsers open (2 MB): the page's link keeps the \
             other settings but not the file; share the file itself."
        ))
    } else if fragment > LONG_FRAGMENT {
        Some(format!(
            "The page's link carries this cfg.toml after its '#' ({kb} KB; no server sees it), but chat apps \
             and mail may cut a link this long: share the file itself if the link does not open."
        ))
    } else {
        None
    }
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
    from_url(query, "")
}

/// The form in a URL's query and fragment (each with or without its `?` or `#`): as
/// [`from_query`], with a `cfg` in the fragment taking the place of one in the query.
pub fn from_url(query: &str, fragment: &str) -> Link {
    let query = query.strip_prefix('?').unwrap_or(query);
    let fragment = fragment.strip_prefix('#').unwrap_or(fragment);
    let mut pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
    pairs.extend(form_urlencoded::parse(fragment.as_bytes()).into_owned().filter(|(k, _)| k == "cfg"));
    let last = |key: &str| pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let start = ExplorerForm::default();
    let mut form = match (last("teacher"), last("cfg")) {
        (Some(CUSTOM), Some(cfg)) => ExplorerForm::from_cfg(cfg, &start.gpu).unwrap_or_else(|_| ExplorerForm {
            teacher: CUSTOM.into(),
            cfg: Some(cfg.into()),
            ..start
        }),
        (Some(teacher), _) => start.with_teacher(teacher).unwrap_or(start),
        (None, _) => ExplorerForm::opening(),
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
        assert!(!to_query(&form).contains("cfg"), "the file is in the fragment, not the query");
        let back = from_url(&to_query(&form), &format!("#{}", to_fragment(&form))).form;
        assert_eq!(back, form);
        assert_eq!(back.family, Family::Mlp);
        // a link from before, with the file in its query, still opens
        let old = format!("?{}&{}", to_query(&form), to_fragment(&form));
        assert_eq!(from_url(&old, "").form, form);
        // the cfg alone: the missing keys are the file's, not the default scenario's
        let alone = form_urlencoded::Serializer::new(String::new())
            .append_pair("teacher", CUSTOM)
            .append_pair("cfg", text)
            .finish();
        assert_eq!(from_query(&alone).form, ExplorerForm::from_cfg(text, &ExplorerForm::default().gpu).unwrap());
        // a cfg is written only for a pasted teacher
        let stale = ExplorerForm { cfg: Some(text.into()), ..ExplorerForm::default() };
        assert_eq!(to_fragment(&stale), "");
    }

    #[test]
    fn a_long_link_is_announced_and_a_too_long_one_left_out() {
        assert_eq!(link_note(LONG_FRAGMENT), None);
        assert!(link_note(1_100_000).unwrap().contains("(1,100 KB; no server sees it)"));
        assert!(link_note(MAX_FRAGMENT + 1).unwrap().contains("needs 2,001 KB in a link"));
    }

    #[test]
    fn missing_keys_take_the_teachers_defaults_and_bad_values_are_kept_aside() {
        assert_eq!(from_query("batch=3").form.batch, 3);
        // a link without a teacher opens on the scenario distill trains with the demo's files
        assert_eq!(from_query("batch=3").form.teacher, "fashion-mnist-cnn");
        assert_eq!(from_query(""), Link { form: ExplorerForm::opening(), bad: vec![] });
        // the page's own links name their teacher: one from before the change opens as it did
        let gpt2 = ExplorerForm::default();
        assert_eq!(gpt2.teacher, "gpt2");
        assert_eq!(from_query(&to_query(&gpt2)).form, gpt2);
        assert_eq!(from_query("?batch=3&utm_source=x&batch=5").form.batch, 5, "unknown keys ignored, last wins");
        let cnn = from_query("teacher=fashion-mnist-cnn").form;
        assert_eq!(cnn, ExplorerForm::default().with_teacher("fashion-mnist-cnn").unwrap());
        // one bad value spoils only its own key
        let link = from_query("gpu=T4&batch=-3&width=abc&precision=fp32");
        assert_eq!((link.form.gpu.as_str(), link.form.precision), ("T4", Precision::Fp32));
        assert_eq!(link.form.batch, ExplorerForm::opening().batch);
        let fields: Vec<_> = link.bad.iter().map(|(f, text, _)| (*f, text.as_str())).collect();
        assert_eq!(fields, [(FormField::Batch, "-3"), (FormField::Width, "abc")]);
        assert_eq!(link.bad[0].2, "must be positive");
    }
}
