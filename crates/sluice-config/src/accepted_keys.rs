//! Every key a configuration file may set, read from the serde structs of `raw.rs` themselves.
//!
//! The configuration reference of the book lists every key with its type, default and meaning,
//! and a test holds it to this list. The list is not written by hand: a deserializer that
//! answers every question serde asks with a placeholder walks [`RawConfig`] and writes down the
//! field names serde's derive hands it (the same names `deny_unknown_fields` accepts), so a
//! field added to a raw struct is in the list the moment it compiles, and the reference test
//! fails until the field is documented.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde::de::value::{BorrowedStrDeserializer, Error};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::raw::RawConfig;

/// Every key a configuration file accepts, as dotted paths from the top of the file, sorted:
/// tables (`server`, `identity.jwt`), arrays of tables (`policy`, `route`, `route.limits`: an
/// entry's keys are under the array's name, `route.limits.key`) and values (`server.listen`).
///
/// ```
/// let keys = sluice_config::accepted_keys();
/// assert!(keys.iter().any(|k| k == "server.listen"));
/// assert!(keys.iter().any(|k| k == "route.limits.key"));
/// assert!(!keys.iter().any(|k| k == "server.nope"));
/// ```
pub fn accepted_keys() -> Vec<String> {
    trace().keys.into_iter().collect()
}

/// What walking [`RawConfig`] found.
#[derive(Default)]
pub(crate) struct Traced {
    /// Every key, as [`accepted_keys`] lists them.
    pub keys: BTreeSet<String>,
    /// The keys that hold arrays (of tables or of values).
    pub arrays: BTreeSet<String>,
}

pub(crate) fn trace() -> Traced {
    let mut traced = Traced::default();
    // A placeholder for every value satisfies every raw struct: validation comes later.
    RawConfig::deserialize(Tracer { path: String::new(), traced: &mut traced })
        .expect("the tracer answers every question the raw structs ask");
    traced
}

/// toml's `Spanned<T>` asks for a struct of this name; its fields are a span and `T` itself,
/// not keys of the file.
const SPANNED: &str = "$__serde_spanned_private_Spanned";

/// `Deserializer` methods that answer with one placeholder value of their type.
macro_rules! placeholders {
    ($($method:ident => $visit:ident($value:expr);)*) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            visitor.$visit($value)
        })*
    };
}

/// A deserializer at one key of the file (`path`): structs record their fields under it.
struct Tracer<'t> {
    path: String,
    traced: &'t mut Traced,
}

impl Tracer<'_> {
    fn at(&mut self, path: String) -> Tracer<'_> {
        Tracer { path, traced: self.traced }
    }
}

impl<'de> Deserializer<'de> for Tracer<'_> {
    type Error = Error;

    /// Only untagged enums ask for "anything" (`RawKey`): a string is one of their forms.
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_str("")
    }

    placeholders! {
        deserialize_bool => visit_bool(false);
        deserialize_u8 => visit_u64(0);
        deserialize_u16 => visit_u64(0);
        deserialize_u32 => visit_u64(0);
        deserialize_u64 => visit_u64(0);
        deserialize_i8 => visit_i64(0);
        deserialize_i16 => visit_i64(0);
        deserialize_i32 => visit_i64(0);
        deserialize_i64 => visit_i64(0);
        deserialize_f32 => visit_f64(0.0);
        deserialize_f64 => visit_f64(0.0);
        deserialize_char => visit_char(' ');
        deserialize_str => visit_str("");
        deserialize_string => visit_str("");
        deserialize_bytes => visit_bytes(&[]);
        deserialize_byte_buf => visit_bytes(&[]);
        deserialize_identifier => visit_str("");
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(self, _: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    /// An array: one element, at the array's own path (an entry's keys are `array.key`).
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.traced.arrays.insert(self.path.clone());
        visitor.visit_seq(OneElement { tracer: Some(self) })
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    /// A table whose keys the user chooses (`policies = { free = "..." }`): no fixed keys.
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(Fields { fields: &[], next: 0, tracer: self, spanned: false })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let spanned = name == SPANNED;
        visitor.visit_map(Fields { fields, next: 0, tracer: self, spanned })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Error> {
        Err(de::Error::custom(format!("{}: enum {name} is not traced; add it to accepted_keys.rs", self.path)))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
}

/// A struct's (or toml span's) fields, each given once, each value traced under its key.
struct Fields<'t> {
    fields: &'static [&'static str],
    next: usize,
    tracer: Tracer<'t>,
    /// The fields are `Spanned`'s own: its value stands at the same key.
    spanned: bool,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some(field) = self.fields.get(self.next) else { return Ok(None) };
        seed.deserialize(BorrowedStrDeserializer::new(field)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let field = self.fields[self.next];
        self.next += 1;
        let path = match (self.spanned, self.tracer.path.as_str()) {
            (true, path) => path.to_string(),
            (false, "") => field.to_string(),
            (false, path) => format!("{path}.{field}"),
        };
        if !self.spanned {
            self.tracer.traced.keys.insert(path.clone());
        }
        seed.deserialize(self.tracer.at(path))
    }
}

/// An array of one element.
struct OneElement<'t> {
    tracer: Option<Tracer<'t>>,
}

impl<'de> SeqAccess<'de> for OneElement<'_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        match self.tracer.take() {
            Some(tracer) => seed.deserialize(tracer).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{accepted_keys, trace};

    /// A TOML document that sets `key` (a dotted path) to a value of the wrong type, its arrays
    /// written inline: `route.limits.key` is `route = [{ limits = [{ key = {} }] }]`.
    fn setting(key: &str, arrays: &std::collections::BTreeSet<String>) -> String {
        let parts: Vec<&str> = key.split('.').collect();
        let mut value = "{ wrong_type = true }".to_string();
        for i in (0..parts.len()).rev() {
            let here = parts[..=i].join(".");
            if i < parts.len() - 1 && arrays.contains(&here) {
                value = format!("[{value}]");
            }
            value = format!("{{ {} = {value} }}", parts[i]);
        }
        // The outermost `{ a = ... }` becomes the document `a = ...`.
        value[2..value.len() - 2].to_string()
    }

    #[test]
    fn every_traced_key_is_one_the_file_accepts() {
        let traced = trace();
        assert!(traced.keys.len() > 80, "{:?}", traced.keys);
        for key in &traced.keys {
            let doc = setting(key, &traced.arrays);
            let err = crate::parse("t.toml", &doc).expect_err(&doc).to_string();
            let name = key.rsplit('.').next().unwrap_or(key);
            let refused = format!("unknown field `{name}`");
            assert!(!err.contains(&refused), "{key} is traced but refused:\n{doc}\n{err}");
        }
    }

    #[test]
    fn a_key_no_struct_has_is_refused_and_not_listed() {
        let keys = accepted_keys();
        for (key, doc) in [
            ("server.nope", "[server]\nnope = 1\n"),
            ("route.limits.nope", "[[route]]\npath = \"/\"\nlimits = [{ nope = 1 }]\n"),
            ("identity.jwt.nope", "[identity.jwt]\nnope = 1\n"),
        ] {
            assert!(!keys.iter().any(|k| k == key));
            let err = crate::parse("t.toml", doc).unwrap_err().to_string();
            assert!(err.contains("unknown field `nope`"), "{err}");
        }
    }

    #[test]
    fn tables_arrays_and_nested_keys_are_named_by_their_path() {
        let traced = trace();
        for key in ["server", "server.trusted_proxies", "policy.name", "route.limits.policies", "identity.jwt.leeway"] {
            assert!(traced.keys.contains(key), "{key}");
        }
        for array in ["policy", "route", "route.limits", "route.methods", "store.urls"] {
            assert!(traced.arrays.contains(array), "{array}");
        }
        // Spanned's own fields are not keys of the file.
        assert!(!traced.keys.iter().any(|k| k.contains("$__")));
    }
}
