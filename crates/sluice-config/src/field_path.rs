//! The field a serde error is about, found from the error's byte span.
//!
//! serde's messages say what is wrong with a value (`invalid type: string "ten", expected
//! u64`) but not where it sits; toml's error carries the value's span. The document is read a
//! second time into toml's spanned tree and walked down to the deepest key whose key or value
//! holds that span: its path (`route[0].limits[1].cost`) is the field, in the same spelling as
//! validation's errors.

use std::fmt::Write;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// The path of the field that `toml::from_str`'s error `e` (read from `text`) is about, or
/// `None` when the text is not TOML at all (then it is a syntax error, with no field).
///
/// `missing field` errors point at the table that lacks it: the missing name is appended to
/// that table's path. `unknown field` errors point at the key itself.
pub(crate) fn field_of(text: &str, e: &toml::de::Error) -> Option<String> {
    let offset = e.span()?.start;
    let root = DeTable::parse(text).ok()?;
    let mut path = String::new();
    walk_table(root.get_ref(), offset, &mut path);
    if let Some(missing) = backticked(e.message(), "missing field `") {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(missing);
    }
    (!path.is_empty()).then_some(path)
}

/// The name serde's message quotes after `marker` (`unknown field `x``, `missing field `x``).
pub(crate) fn backticked<'m>(message: &'m str, marker: &str) -> Option<&'m str> {
    message.split_once(marker)?.1.split('`').next()
}

/// Appends to `path` the key of `table` holding `offset`, and what lies below it.
fn walk_table(table: &DeTable<'_>, offset: usize, path: &mut String) {
    for (key, value) in table.iter() {
        let at_key = key.span().contains(&offset);
        if at_key || holds(value, offset) {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(key.get_ref());
            if !at_key {
                walk_value(value, offset, path);
            }
            return;
        }
    }
}

/// Appends to `path` where inside `value` (a table, an array's index) `offset` lies.
fn walk_value(value: &Spanned<DeValue<'_>>, offset: usize, path: &mut String) {
    match value.get_ref() {
        DeValue::Table(t) => walk_table(t, offset, path),
        DeValue::Array(items) => {
            if let Some((i, item)) = items.iter().enumerate().find(|(_, item)| holds(item, offset)) {
                let _ = write!(path, "[{i}]");
                walk_value(item, offset, path);
            }
        }
        _ => {}
    }
}

/// True when `offset` lies in `value` or anywhere below it. A table's own span may cover only
/// its `[header]` line, so its keys and values are looked at too.
fn holds(value: &Spanned<DeValue<'_>>, offset: usize) -> bool {
    value.span().contains(&offset)
        || match value.get_ref() {
            DeValue::Table(t) => t.iter().any(|(k, v)| k.span().contains(&offset) || holds(v, offset)),
            DeValue::Array(items) => items.iter().any(|item| holds(item, offset)),
            _ => false,
        }
}
