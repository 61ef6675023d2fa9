//! The form as a URL query (`?teacher=gpt2&batch=8&...`), so that a link reproduces a view.
use estimator_wasm::explore::Explore;

/// The query string of `form`, without the leading `?`.
pub fn to_query(form: &Explore) -> String {
    serde_urlencoded::to_string(form).unwrap_or_default()
}

/// The form in a query string (with or without the leading `?`); keys left out take the
/// default form's values.
///
/// # Errors
/// A one-line message naming the value that could not be read.
pub fn from_query(query: &str) -> Result<Explore, String> {
    let query = query.strip_prefix('?').unwrap_or(query);
    if query.is_empty() {
        return Ok(Explore::default());
    }
    serde_urlencoded::from_str(query).map_err(|e| format!("the link's settings could not be read ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use estimator_wasm::spec::{Family, Precision};

    #[test]
    fn a_form_survives_the_round_trip() {
        let form =
            Explore { width: 0.5, precision: Precision::Fp16, checkpointing: "sqrt".into(), ..Explore::default() };
        let q = to_query(&form);
        assert!(q.contains("width=0.5") && q.contains("precision=fp16"), "{q}");
        assert_eq!(from_query(&format!("?{q}")).unwrap(), form);
    }

    #[test]
    fn a_pasted_cfg_travels_in_the_query() {
        let text = "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[teacher]\npreset = \"fashion-mnist-cnn\"\n\
                    [student]\nfamily = \"mlp\"\nhidden = [64]\n";
        let form = Explore::from_cfg(text, "T4").unwrap();
        let back = from_query(&to_query(&form)).unwrap();
        assert_eq!(back, form);
        assert_eq!(back.family, Family::Mlp);
    }

    #[test]
    fn missing_keys_take_defaults_and_bad_values_are_reported() {
        let form = from_query("batch=3").unwrap();
        assert_eq!(form.batch, 3);
        assert_eq!(form.teacher, Explore::default().teacher);
        assert_eq!(from_query("").unwrap(), Explore::default());
        let e = from_query("batch=-3").unwrap_err();
        assert!(e.contains("could not be read"), "{e}");
    }
}
