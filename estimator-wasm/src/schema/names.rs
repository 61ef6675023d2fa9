//! One rule for every name the cfg.toml and the explorer look up (enum values such as
//! `student.activation`, `teacher.preset`, `estimate.gpu`, the explorer's teachers): a name
//! matches when it equals the exact name ignoring ASCII case, white space, `-`, `_` and `.`.
//! So `"T4 "`, `" Leaky-ReLU"` and `"GPT2"` are `T4`, `leaky_relu` and `gpt2`, and what a
//! config stores, serialises and reports afterwards is always the exact name. A name that
//! matches nothing is refused with the list of exact names.
use serde::de::{Deserializer, Error, Visitor};

/// `name` reduced to what the match compares: ASCII lowercase without white space, `-`, `_`, `.`.
pub fn fold(name: &str) -> String {
    let kept = name.chars().filter(|c| !(c.is_ascii_whitespace() || matches!(c, '-' | '_' | '.')));
    kept.map(|c| c.to_ascii_lowercase()).collect()
}

/// Most characters of a user's text an error message repeats ([`short`]).
pub const ECHO_CHARS: usize = 24;

/// `text` as an error message repeats it: at most [`ECHO_CHARS`] characters, then `...` when
/// it was longer, so that a pasted megabyte never ends up whole in a message (or a page).
pub fn short(text: &str) -> String {
    match text.char_indices().nth(ECHO_CHARS) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_string(),
    }
}

/// Whether `given` names `exact` under the rule above.
pub fn same(given: &str, exact: &str) -> bool {
    fold(given) == fold(exact)
}

/// The index of the name in `names` that `given` matches.
pub fn index(given: &str, names: &[&str]) -> Option<usize> {
    let given = fold(given);
    names.iter().position(|n| fold(n) == given)
}

/// Deserialises a string that matches one of `names`; its index. Otherwise serde's
/// "unknown variant `x`, expected one of `a`, `b`" (which basic-toml places on its key).
pub(crate) fn variant<'de, D: Deserializer<'de>>(d: D, names: &'static [&'static str]) -> Result<usize, D::Error> {
    struct Names(&'static [&'static str]);
    impl Visitor<'_> for Names {
        type Value = usize;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a name")
        }
        fn visit_str<E: Error>(self, v: &str) -> Result<usize, E> {
            index(v, self.0).ok_or_else(|| E::unknown_variant(&short(v), self.0))
        }
    }
    d.deserialize_str(Names(names))
}

/// The names of a unit enum, one table for reading and writing: `names!(Pool { Max = "max",
/// Avg = "avg" })` gives `Pool::NAMES` (the exact names, in declaration order),
/// `Pool::Max.name()`, a `Serialize` that writes that name, and a lenient `Deserialize`
/// ([`variant`]).
macro_rules! names {
    ($ty:ident { $($v:ident = $name:literal),+ $(,)? }) => {
        impl $ty {
            /// The exact names, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($name),+];
            pub(crate) const VALUES: &'static [$ty] = &[$($ty::$v),+];

            /// The name cfg.toml spells this value with (also what it serialises to).
            pub const fn name(self) -> &'static str {
                match self {
                    $($ty::$v => $name),+
                }
            }
        }
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                crate::schema::names::variant(d, $ty::NAMES).map(|i| $ty::VALUES[i])
            }
        }
    };
}
pub(crate) use names;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_ignoring_case_space_and_separators_only() {
        let names = ["leaky_relu", "relu", "A100-40GB-MIG-1g.5gb"];
        assert_eq!(index(" Leaky-ReLU\t", &names), Some(0));
        assert_eq!(index("RELU", &names), Some(1));
        assert_eq!(index("a100 40gb mig 1g5gb", &names), Some(2));
        assert_eq!(index("relu6", &names), None);
        assert_eq!(index("", &names), None);
        assert_eq!(fold(" T4 "), "t4");
    }

    #[test]
    fn messages_echo_a_short_prefix_of_long_names() {
        assert_eq!(short("T4"), "T4");
        assert_eq!(short(&"x".repeat(24)), "x".repeat(24));
        assert_eq!(short(&"é".repeat(20_000)), format!("{}...", "é".repeat(24)));
        let e = crate::schema::catalogue::gpu(&"G".repeat(20_000)).unwrap_err().to_string();
        assert!(e.starts_with(&format!("unknown GPU \"{}...\"; known: ", "G".repeat(24))), "{e}");
        assert!(e.len() < 1000, "{} characters", e.len());
        let text = format!(
            "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nactivation = \"{}\"\n",
            "r".repeat(20_000)
        );
        let e = crate::Config::from_toml_str(&text).unwrap_err().to_string();
        assert!(e.contains(&format!("unknown variant `{}...`", "r".repeat(24))) && e.len() < 1000, "{e}");
    }

    #[test]
    fn unit_enums_write_the_names_they_read() {
        use crate::schema::{Activation, Precision, PruneScope};
        assert_eq!(Precision::Bf16Master.name(), "bf16_master");
        assert_eq!(serde_json::to_string(&Activation::LeakyRelu).unwrap(), "\"leaky_relu\"");
        for (i, p) in Precision::VALUES.iter().enumerate() {
            assert_eq!(p.name(), Precision::NAMES[i]);
            let text = serde_json::to_string(p).unwrap();
            assert_eq!(serde_json::from_str::<Precision>(&text).unwrap(), *p, "{text}");
        }
        assert_eq!(PruneScope::Layer.name(), "layer");
    }
}
