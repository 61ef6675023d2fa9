//! serde by hand for the cfg.toml values that are a number or a name: `train.batch_size`
//! (`128` or `"auto"`), `student.checkpointing` (`"none"`, `"sqrt"` or a number of segments)
//! and `teacher.output` (a tuple index or a dict key). Written as TOML integers and strings.
use serde::{Deserialize, Serialize};

use crate::schema::spec::{BatchSize, OutputSelector};
use crate::schema::student_spec::Checkpointing;

impl Serialize for Checkpointing {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Checkpointing::None => s.serialize_str("none"),
            Checkpointing::Sqrt => s.serialize_str("sqrt"),
            Checkpointing::Segments(n) => s.serialize_u64(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Checkpointing {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const EXPECTED: &str = "checkpointing must be \"none\", \"sqrt\" or a number of segments >= 1";
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Checkpointing;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Checkpointing, E> {
                match u64::try_from(v) {
                    Ok(n) if n >= 1 => Ok(Checkpointing::Segments(n)),
                    _ => Err(E::custom(EXPECTED)),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Checkpointing, E> {
                self.visit_i64(i64::try_from(v).map_err(|_| E::custom(EXPECTED))?)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Checkpointing, E> {
                match crate::schema::names::index(v, &["none", "sqrt"]) {
                    Some(0) => Ok(Checkpointing::None),
                    Some(_) => Ok(Checkpointing::Sqrt),
                    None => Err(E::custom(EXPECTED)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl Serialize for OutputSelector {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            OutputSelector::Index(i) => s.serialize_u64(*i),
            OutputSelector::Key(k) => s.serialize_str(k),
        }
    }
}

/// An integer >= 0 or a string, refused otherwise with the message serde's `untagged` gives
/// (a derived untagged enum buffers every value first, which the browser page pays for).
impl<'de> Deserialize<'de> for OutputSelector {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const NO_MATCH: &str = "data did not match any variant of untagged enum OutputSelector";
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = OutputSelector;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(NO_MATCH)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<OutputSelector, E> {
                u64::try_from(v).map(OutputSelector::Index).map_err(|_| E::custom(NO_MATCH))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<OutputSelector, E> {
                Ok(OutputSelector::Index(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<OutputSelector, E> {
                Ok(OutputSelector::Key(v.to_string()))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<OutputSelector, E> {
                Err(E::custom(NO_MATCH))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<OutputSelector, E> {
                Err(E::custom(NO_MATCH))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<OutputSelector, A::Error> {
                Err(serde::de::Error::custom(NO_MATCH))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<OutputSelector, A::Error> {
                Err(serde::de::Error::custom(NO_MATCH))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl Serialize for BatchSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BatchSize::Fixed(n) => s.serialize_u64(*n),
            BatchSize::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for BatchSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = BatchSize;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a positive integer or \"auto\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<BatchSize, E> {
                u64::try_from(v)
                    .map(BatchSize::Fixed)
                    .map_err(|_| E::custom("batch_size must be a positive integer or \"auto\""))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<BatchSize, E> {
                Ok(BatchSize::Fixed(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<BatchSize, E> {
                match crate::schema::names::same(v, "auto") {
                    true => Ok(BatchSize::Auto),
                    false => Err(E::custom("batch_size must be a positive integer or \"auto\"")),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::spec::Config;

    const CFG: &str = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\n";

    #[test]
    fn a_teachers_output_is_an_index_or_a_key() {
        let output = |v: &str| Config::from_toml_str(&format!("{CFG}[teacher]\noutput = {v}\n"));
        assert_eq!(output("2").unwrap().teacher.output, Some(OutputSelector::Index(2)));
        assert_eq!(output("\"logits\"").unwrap().teacher.output, Some(OutputSelector::Key("logits".into())));
        for bad in ["-1", "1.5", "true", "[0]", "{ a = 1 }"] {
            let reason = output(bad).unwrap_err().to_string();
            assert!(
                reason.contains(
                    "data did not match any variant of untagged enum OutputSelector for key `teacher.output`"
                ),
                "{bad}: {reason}"
            );
        }
    }
}
