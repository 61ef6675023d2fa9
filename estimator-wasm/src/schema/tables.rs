//! The schema's structs ([`crate::schema::Config`], `[data]`, `[student]`, ...) are read from
//! TOML tables only. serde's derived `Deserialize` for a struct also accepts a sequence of its
//! fields in declaration order (`data = [[784], 10]`, or `[[data]]`), and that visitor is
//! monomorphised for every field type and every sequence type of the TOML reader: about a
//! tenth of the browser page's wasm for a form of input no cfg.toml uses. So each struct's
//! derive is `#[serde(remote = "Self")]` (inherent `serialize`/`deserialize` functions) and
//! [`tables!`] adds the trait impls: writing is the derived one, reading goes through
//! [`Tables`], which hands the derived visitor to the reader without its sequence half.
//! A table written as an array is then refused with serde's
//! "invalid type: sequence, expected struct DataSpec".
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};

/// A deserializer that reads structs from maps only: `deserialize_struct` passes the derived
/// visitor on wrapped in [`MapOnly`]; everything else is the inner deserializer's.
pub(crate) struct Tables<D>(pub D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Tables<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_struct(name, fields, MapOnly(visitor))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// A visitor that takes a map only (anything else is serde's "invalid type" error, naming
/// what the inner visitor expects).
struct MapOnly<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for MapOnly<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(map)
    }
}

/// `Serialize` and `Deserialize` for structs whose derive is `#[serde(remote = "Self")]`:
/// written as derived, read through [`Tables`].
macro_rules! tables {
    ($($ty:ident),+ $(,)?) => {$(
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                $ty::serialize(self, s)
            }
        }
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $ty::deserialize(crate::schema::tables::Tables(d))
            }
        }
    )+};
}
pub(crate) use tables;

#[cfg(test)]
mod tests {
    use crate::schema::{Config, SpecError};

    fn reason(text: &str) -> String {
        match Config::from_toml_str(text) {
            Err(SpecError::Parse { reason, .. }) => reason,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn structs_read_from_tables_and_inline_tables_but_not_from_arrays() {
        let student = "[student]\nfamily = \"mlp\"\nhidden = [8]\n";
        let table = Config::from_toml_str(&format!("[data]\ninput_shape = [4]\nclasses = 3\n{student}")).unwrap();
        let inline = Config::from_toml_str(&format!("data = {{ input_shape = [4], classes = 3 }}\n{student}")).unwrap();
        assert_eq!((table.data.input_shape.as_slice(), table.data.classes), (&[4][..], 3));
        assert_eq!(inline, table);
        // the fields in declaration order, as an array or an array of tables
        assert_eq!(
            reason(&format!("data = [[4], 3]\n{student}")),
            "invalid type: sequence, expected struct DataSpec for key `data`"
        );
        assert_eq!(
            reason(&format!("[[data]]\ninput_shape = [4]\nclasses = 3\n{student}")),
            "invalid type: sequence, expected struct DataSpec for key `data`"
        );
        assert_eq!(
            reason("[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"transformer\"\ntransformer = [2]\n"),
            "invalid type: sequence, expected struct TransformerSpec for key `student.transformer`"
        );
    }
}
