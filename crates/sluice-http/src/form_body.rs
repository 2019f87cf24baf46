//! Fields of an `application/x-www-form-urlencoded` body (and of a query string) read the way
//! every common reader would read them — or refused when readers could disagree.
//!
//! Readers agree on `&` between pairs, `=` between name and value, `+` as a space and `%XX`
//! escapes. They disagree on the rest: Python before 3.9.2 and old Rack also split on `;`,
//! ASP.NET binds names whatever their case, Rails and PHP read `email[]` and `email[x]` as the
//! `email` parameter (an array or a hash), Spring binds `user.email` into `user`, and on a
//! repeated name some take the first, some the last, some both. So a keyed field must appear
//! exactly once, in exactly its own spelling, and its value must read the same whether `;`
//! separates pairs or not.

use crate::body_refusal::BodyRefusal;

/// A form body whose every pair decodes (valid escapes, UTF-8): fields are looked up by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormBody {
    /// The body as it came (checked to decode).
    raw: String,
}

/// How a pair's name relates to a field name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spelling {
    /// Exactly the field's name.
    Exact,
    /// Another name some reader binds to the field: another case, `name[...]`, `name.x`.
    Variant,
    /// Another field.
    Other,
}

impl FormBody {
    /// The body `bytes`, if every pair of it decodes: escapes are `%` and two hex digits, and
    /// the decoded names and values are UTF-8.
    ///
    /// ```
    /// use sluice_http::form_body::FormBody;
    /// use sluice_http::body_key::BodyRefusal;
    /// let form = FormBody::parse(b"email=Victim%40example.com&lang=uk").unwrap();
    /// assert_eq!(form.field("email"), Ok(Some("Victim@example.com".to_string())));
    /// assert_eq!(form.field("phone"), Ok(None));
    /// assert_eq!(FormBody::parse(b"email=100%").unwrap_err(), BodyRefusal::NotForm);
    /// let twice = FormBody::parse(b"email=victim%40x&email=me%40x").unwrap();
    /// assert_eq!(twice.field("email"), Err(BodyRefusal::Ambiguous));
    /// let semicolon = FormBody::parse(b"email=victim%40x;email=me%40x").unwrap();
    /// assert_eq!(semicolon.field("email"), Err(BodyRefusal::Ambiguous));
    /// let array = FormBody::parse(b"email[]=victim%40x").unwrap();
    /// assert_eq!(array.field("email"), Err(BodyRefusal::Ambiguous));
    /// ```
    pub fn parse(bytes: &[u8]) -> Result<Self, BodyRefusal> {
        let raw = std::str::from_utf8(bytes).map_err(|_| BodyRefusal::NotForm)?;
        for pair in raw.split(['&', ';']) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            decode(name)?;
            decode(value)?;
        }
        Ok(Self { raw: raw.to_owned() })
    }

    /// The decoded value of field `name`: `None` when no pair names it; refused when the body
    /// names it more than once, in another spelling, or with a value that `;` would split.
    pub fn field(&self, name: &str) -> Result<Option<String>, BodyRefusal> {
        // Every reader's view: pairs split on `&` and on `;` too.
        let mut found = None;
        for pair in self.raw.split(['&', ';']) {
            let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
            match spelling(&decode(n)?, name) {
                Spelling::Other => {}
                Spelling::Variant => return Err(BodyRefusal::Ambiguous),
                Spelling::Exact if found.is_some() => return Err(BodyRefusal::Ambiguous),
                Spelling::Exact => found = Some(v),
            }
        }
        let Some(value) = found else { return Ok(None) };
        // The `&`-only view must hold the same pair with the same value: `email=a;b` is `a` to
        // one reader and `a;b` to another, and `x=;email=a` has no `email` at all for the
        // reader that splits on `&` only.
        let mut same = self.raw.split('&').filter_map(|pair| {
            let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(n).ok().as_deref() == Some(name)).then_some(v)
        });
        if same.next() != Some(value) || same.next().is_some() {
            return Err(BodyRefusal::Ambiguous);
        }
        Ok(Some(decode(value)?))
    }
}

/// True when the query string `query` names `field` in any spelling a reader binds to it
/// (`email`, `Email`, `email[]`, `email[x]`, `email.x`, escaped or not). Such a query beside a
/// keyed body field lets the application read one while sluice keys the other. A query that
/// does not decode counts as naming it (it cannot be shown not to).
///
/// ```
/// use sluice_http::form_body::query_names;
/// assert!(query_names("email=victim%40example.com", "email"));
/// assert!(query_names("lang=uk&%45mail=x", "email"));
/// assert!(query_names("user%5Bemail%5D=x", "user"));
/// assert!(!query_names("lang=uk&emails=2", "email"));
/// ```
pub fn query_names(query: &str, field: &str) -> bool {
    query.split(['&', ';']).any(|pair| {
        let name = pair.split_once('=').map_or(pair, |(n, _)| n);
        decode(name).map_or(true, |n| spelling(&n, field) != Spelling::Other)
    })
}

/// How `name` (decoded) relates to `field`.
fn spelling(name: &str, field: &str) -> Spelling {
    if name == field {
        return Spelling::Exact;
    }
    let Some(head) = name.get(..field.len()) else { return Spelling::Other };
    if !head.eq_ignore_ascii_case(field) {
        return Spelling::Other;
    }
    match name.as_bytes().get(field.len()) {
        None | Some(b'[' | b'.') => Spelling::Variant,
        Some(_) => Spelling::Other,
    }
}

/// A name or value decoded: `+` is a space, `%XX` the byte it names; the result must be UTF-8.
fn decode(text: &str) -> Result<String, BodyRefusal> {
    let bytes = text.as_bytes();
    if !bytes.iter().any(|&b| b == b'%' || b == b'+') {
        return Ok(text.to_owned());
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or(BodyRefusal::NotForm)?;
                out.push(byte);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| BodyRefusal::NotForm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_json_in_a_form_trick_reads_as_a_form_reads_it() {
        // Express's urlencoded parser reads the victim here; so does sluice's form: part.
        let body = br#"{"x":"&email=victim%40example.com&","email":"decoy@example.net"}"#;
        let form = FormBody::parse(body).unwrap();
        assert_eq!(form.field("email"), Ok(Some("victim@example.com".into())));
    }

    #[test]
    fn spellings_other_readers_bind_are_refused() {
        for body in [
            &b"Email=a"[..],
            b"EMAIL=a",
            b"email[0]=a",
            b"email.x=a",
            b"e%6Dail=a&email=b",
            b"email=a&email=a",
            b"lang=uk;email=a&email=b",
            b"email=a;b",
        ] {
            let form = FormBody::parse(body).unwrap();
            assert_eq!(form.field("email"), Err(BodyRefusal::Ambiguous), "{}", String::from_utf8_lossy(body));
        }
        let ok = FormBody::parse(b"emails=1&e-mail=2&email=a+b%2Bc").unwrap();
        assert_eq!(ok.field("email"), Ok(Some("a b+c".into())));
        assert_eq!(FormBody::parse(b"a=%zz").unwrap_err(), BodyRefusal::NotForm);
        assert_eq!(FormBody::parse(b"a=%ff").unwrap_err(), BodyRefusal::NotForm, "not UTF-8");
        assert_eq!(FormBody::parse(&[0xff]).unwrap_err(), BodyRefusal::NotForm);
    }

    /// A form reader that splits on `&` (and, if `semicolons`, on `;`), takes the first or the
    /// last of a repeated name, and binds names case-insensitively if `folds`.
    fn reader(body: &str, field: &str, semicolons: bool, last: bool, folds: bool) -> Option<String> {
        let pairs: Vec<&str> = if semicolons { body.split(['&', ';']).collect() } else { body.split('&').collect() };
        let mut hits = pairs.into_iter().filter_map(|p| {
            let (n, v) = p.split_once('=').unwrap_or((p, ""));
            let n = decode(n).ok()?;
            let same = if folds { n.eq_ignore_ascii_case(field) } else { n == field };
            same.then(|| decode(v).ok()).flatten()
        });
        if last { hits.next_back() } else { hits.next() }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(3000)))]

        #[test]
        fn any_bytes_parse_or_are_refused_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(form) = FormBody::parse(&bytes) {
                let _ = form.field("email");
            }
            let _ = query_names(&String::from_utf8_lossy(&bytes), "email");
        }

        /// Differential: when sluice reads a value, every reader above reads that same value.
        #[test]
        fn a_value_sluice_keys_is_the_value_every_reader_reads(
            pairs in proptest::collection::vec(
                (prop_oneof![Just("email"), Just("Email"), Just("email[]"), Just("e%6dail"), Just("x"), Just("")],
                 "[a-c@;+%2]{0,4}"),
                0..5,
            ),
            seps in proptest::collection::vec(prop_oneof![Just('&'), Just(';')], 5),
        ) {
            let mut body = String::new();
            for (i, (n, v)) in pairs.iter().enumerate() {
                if i > 0 { body.push(seps[i]); }
                body.push_str(n);
                body.push('=');
                body.push_str(v);
            }
            let Ok(form) = FormBody::parse(body.as_bytes()) else { return Ok(()) };
            if let Ok(Some(ours)) = form.field("email") {
                for (semi, last, folds) in [(false, false, false), (true, false, false), (false, true, false), (true, true, true)] {
                    let theirs = reader(&body, "email", semi, last, folds);
                    prop_assert_eq!(theirs.as_deref(), Some(ours.as_str()), "{}", body);
                }
            }
        }
    }
}
