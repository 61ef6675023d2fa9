//! The form as a URL query (`?teacher=gpt2&batch=8&...`), so that a link reproduces a view.
//! Each key holds what its input shows ([`Field::text`]); `cfg` holds a pasted cfg.toml.
use estimator_wasm::explore::Explore;

use crate::field::Field;

/// The query string of `form`, without the leading `?`: every field, then `cfg` if any.
pub fn to_query(form: &Explore) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for field in Field::ALL {
        query.append_pair(field.key(), &field.text(form));
    }
    if let Some(cfg) = &form.cfg {
        query.append_pair("cfg", cfg);
    }
    query.finish()
}

/// The form in a query string (with or without the leading `?`); keys left out take the
/// default form's values, keys the form does not have are ignored.
///
/// # Errors
/// A one-line message naming the key whose value could not be read, and why.
pub fn from_query(query: &str) -> Result<Explore, String> {
    let query = query.strip_prefix('?').unwrap_or(query);
    let mut form = Explore::default();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match Field::from_key(&key) {
            Some(field) => field
                .set(&mut form, &value)
                .map_err(|e| format!("the link's settings could not be read ({key}: {e})"))?,
            None if key == "cfg" => form.cfg = Some(value.into_owned()),
            None => {}
        }
    }
    Ok(form)
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
        assert_eq!(from_query("?batch=3&utm_source=x").unwrap().batch, 3, "unknown keys are ignored");
        let e = from_query("batch=-3").unwrap_err();
        assert_eq!(e, "the link's settings could not be read (batch: must be positive)");
    }
}
