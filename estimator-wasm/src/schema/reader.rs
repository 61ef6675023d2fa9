//! The schema's types are deserialised by one deserializer of this module, not by basic-toml's
//! own ones. basic-toml hands a table over through two map accesses (header tables, inline
//! tables), a value through two deserializers and an array through two sequence accesses, and
//! serde's derived code is monomorphised for each: several copies of every struct visitor and
//! every field reader of the schema, the largest part of its code in the browser page. So
//! [`read`]
//! 1. records the document as a flat list of [`Event`]s, read through basic-toml by one small
//!    visitor ([`Capture`]);
//! 2. deserialises the schema's type from that list with [`Events`] (one `Deserializer`, one
//!    `MapAccess`, one `SeqAccess`), which call the visitors as basic-toml's do: integers
//!    `visit_i64`, strings `visit_string`, an option present is `visit_some`, an array left
//!    with elements unread is refused as serde's `SeqDeserializer::end` refuses it;
//! 3. on an error of the schema, records the text once more and raises that error's message
//!    (`Error::custom`, which is what every serde error of basic-toml is) in the visit of the
//!    value, array or table it was raised on, so basic-toml places it and names its key
//!    exactly as when it ran the schema's visitors itself.
//!
//! An error of basic-toml itself (syntax, a duplicate key or table) ends the recording; it is
//! the answer when the schema's reading gets to the place where the recording ended, and a
//! schema error before that place is, as it was when basic-toml drove the schema's visitors.
//! The one difference is for derived enums, which the schema has none of (`names!` reads its
//! enums): their errors would be placed on the value (basic-toml: on the enclosing table), and a
//! value that is not a string refused with serde's "invalid type" (basic-toml: "expected string").
use std::cell::RefCell;
use std::fmt;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};

/// One step of a recorded document, in the order basic-toml hands them over.
enum Event {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    /// An array (`len`: its elements, as basic-toml's `SeqDeserializer` hints) or an array
    /// of tables (`len`: `None`); `end` is the index of its [`Event::End`] (`usize::MAX`
    /// while open, or when the recording stopped inside it).
    Seq {
        len: Option<usize>,
        end: usize,
    },
    /// A table: a [`Event::Key`] and its value for each key, then an [`Event::End`].
    Map {
        end: usize,
    },
    Key(String),
    End,
}

#[derive(Default)]
struct Recording {
    events: Vec<Event>,
    /// The indices of the arrays and tables not yet ended.
    open: Vec<usize>,
    /// When replaying: the index of the event whose visit raises this message.
    raise: Option<(usize, String)>,
}

thread_local! {
    static RECORDING: RefCell<Recording> = const {
        RefCell::new(Recording { events: Vec::new(), open: Vec::new(), raise: None })
    };
}

/// Appends `event`; an error when it is the event to raise on.
fn record<E: de::Error>(event: Event) -> Result<Capture, E> {
    RECORDING.with_borrow_mut(|r| {
        let at = r.events.len();
        match event {
            Event::Seq { .. } | Event::Map { .. } => r.open.push(at),
            Event::End => {
                if let Some(Event::Seq { end, .. } | Event::Map { end }) =
                    r.open.pop().and_then(|s| r.events.get_mut(s))
                {
                    *end = at;
                }
            }
            _ => {}
        }
        r.events.push(event);
        match &r.raise {
            Some((raise, message)) if *raise == at => Err(E::custom(message)),
            _ => Ok(Capture),
        }
    })
}

/// Records every value basic-toml reads from a document (see [`record`]).
struct Capture;

impl<'de> de::Deserialize<'de> for Capture {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Capture, D::Error> {
        d.deserialize_any(Capture)
    }
}

impl<'de> Visitor<'de> for Capture {
    type Value = Capture;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a TOML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Capture, E> {
        record(Event::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Capture, E> {
        record(Event::Int(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Capture, E> {
        record(Event::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Capture, E> {
        record(Event::Str(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Capture, E> {
        record(Event::Str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Capture, A::Error> {
        record::<A::Error>(Event::Seq { len: seq.size_hint(), end: usize::MAX })?;
        while seq.next_element::<Capture>()?.is_some() {}
        record(Event::End)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Capture, A::Error> {
        record::<A::Error>(Event::Map { end: usize::MAX })?;
        while let Some(key) = map.next_key::<String>()? {
            record::<A::Error>(Event::Key(key))?;
            map.next_value::<Capture>()?;
        }
        record(Event::End)
    }
}

/// Records `text` through basic-toml, raising `raise`'s message on its event: the events
/// (up to basic-toml's own error, if any) and basic-toml's answer.
fn capture(text: &str, raise: Option<(usize, String)>) -> (Vec<Event>, Result<Capture, basic_toml::Error>) {
    RECORDING.set(Recording { raise, ..Recording::default() });
    let answer = basic_toml::from_str::<Capture>(text);
    (RECORDING.take().events, answer)
}

/// Why [`read`] failed.
pub(crate) enum Failure {
    /// basic-toml's error, as it gives it when it runs the schema's visitors itself.
    Toml(basic_toml::Error),
    /// A schema error the replay did not raise (never expected): the message alone.
    Unplaced(String),
}

/// `text` as a `T`, with basic-toml's errors (see the module's documentation).
pub(crate) fn read<T: DeserializeOwned>(text: &str) -> Result<T, Failure> {
    let (events, recorded) = capture(text, None);
    let error = match T::deserialize(Events(&mut Reader { events, pos: 0 })) {
        Ok(value) => return recorded.map(|_| value).map_err(Failure::Toml),
        Err(error) => error,
    };
    let replay = match (error.cut, recorded) {
        (true, Err(toml)) => return Err(Failure::Toml(toml)),
        (true, Ok(_)) => return Err(Failure::Unplaced(error.message)),
        (false, _) => capture(text, Some((error.at.unwrap_or(0), error.message.clone()))).1,
    };
    Err(replay.err().map_or(Failure::Unplaced(error.message), Failure::Toml))
}

/// An error of the schema's visitors, with the index of the event whose visit raised it; or
/// `cut`: the schema read past the end of a recording that basic-toml's error stopped.
#[derive(Debug)]
pub(crate) struct Error {
    message: String,
    at: Option<usize>,
    cut: bool,
}

impl Error {
    fn cut() -> Error {
        Error { message: "the document ends early".to_string(), at: None, cut: true }
    }

    /// The innermost value's index is kept: the visit of `at` raised this only when no value
    /// inside it did.
    fn raised_at(mut self, at: usize) -> Error {
        self.at = self.at.or(Some(at));
        self
    }
}

impl de::Error for Error {
    fn custom<T: fmt::Display>(message: T) -> Error {
        Error { message: message.to_string(), at: None, cut: false }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// A recording being read.
struct Reader {
    events: Vec<Event>,
    pos: usize,
}

impl Reader {
    /// The next event, taken out of the recording.
    fn next(&mut self) -> Result<Event, Error> {
        let event = self.events.get_mut(self.pos).ok_or_else(Error::cut)?;
        self.pos += 1;
        Ok(std::mem::replace(event, Event::End))
    }

    /// Whether the next event ends an array or table (consumed if so).
    fn at_end(&mut self) -> Result<bool, Error> {
        let end = matches!(self.events.get(self.pos).ok_or_else(Error::cut)?, Event::End);
        self.pos += usize::from(end);
        Ok(end)
    }

    /// Moves past the array or table that ends at `end`, read or not.
    fn skip_to(&mut self, end: usize) -> Result<(), Error> {
        match end {
            usize::MAX => Err(Error::cut()),
            _ => {
                self.pos = self.pos.max(end + 1);
                Ok(())
            }
        }
    }
}

/// The deserializer of the value that starts at the reader's position.
struct Events<'a>(&'a mut Reader);

impl<'de> Deserializer<'de> for Events<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let r = self.0;
        let at = r.pos;
        let (value, end) = match r.next()? {
            Event::Int(v) => (visitor.visit_i64(v), None),
            Event::Float(v) => (visitor.visit_f64(v), None),
            Event::Bool(v) => (visitor.visit_bool(v), None),
            Event::Str(v) => (visitor.visit_string(v), None),
            Event::Seq { len, end } => {
                let mut seq = Seq { r: &mut *r, len, taken: 0, done: false };
                (visitor.visit_seq(&mut seq).and_then(|value| seq.end().map(|()| value)), Some(end))
            }
            Event::Map { end } => (visitor.visit_map(Map { r: &mut *r, done: false }), Some(end)),
            Event::Key(_) | Event::End => return Err(Error::cut()),
        };
        let value = value.map_err(|e| e.raised_at(at))?;
        if let Some(end) = end {
            r.skip_to(end)?;
        }
        Ok(value)
    }

    /// As basic-toml: a value that is there is `Some` (a missing key is `None`).
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    /// As basic-toml: a string is a unit variant's name.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let r = self.0;
        let at = r.pos;
        if !matches!(r.events.get(at), Some(Event::Str(_))) {
            return Events(r).deserialize_any(visitor);
        }
        match r.next()? {
            Event::Str(name) => visitor.visit_enum(name.into_deserializer()),
            _ => Err(Error::cut()),
        }
        .map_err(|e| e.raised_at(at))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

/// An array's elements (or an array of tables'), up to its [`Event::End`].
struct Seq<'a> {
    r: &'a mut Reader,
    len: Option<usize>,
    taken: usize,
    done: bool,
}

impl Seq<'_> {
    /// basic-toml's check after an array is read: serde's `SeqDeserializer::end`, which
    /// refuses elements left unread ("invalid length 3, expected 2 elements in sequence").
    fn end(&self) -> Result<(), Error> {
        match self.len.map_or(0, |len| len.saturating_sub(self.taken)) {
            0 => Ok(()),
            left => Err(de::Error::invalid_length(self.taken + left, &InSeq(self.taken))),
        }
    }
}

/// serde's `ExpectedInSeq`.
struct InSeq(usize);

impl de::Expected for InSeq {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self.0 {
            1 => f.write_str("1 element in sequence"),
            n => write!(f, "{n} elements in sequence"),
        }
    }
}

impl<'de> SeqAccess<'de> for Seq<'_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        if self.done || self.r.at_end()? {
            self.done = true;
            return Ok(None);
        }
        self.taken += 1;
        seed.deserialize(Events(&mut *self.r)).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        self.len.map(|len| len.saturating_sub(self.taken))
    }
}

/// A table's keys and values, up to its [`Event::End`].
struct Map<'a> {
    r: &'a mut Reader,
    done: bool,
}

impl<'de> MapAccess<'de> for Map<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        if self.done {
            return Ok(None);
        }
        match self.r.next()? {
            Event::Key(key) => seed.deserialize(key.into_deserializer()).map(Some),
            _ => {
                self.done = true;
                Ok(None)
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        seed.deserialize(Events(&mut *self.r))
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
