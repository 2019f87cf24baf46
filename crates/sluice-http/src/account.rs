//! Account names as the application behind sluice may compare them: one key for every spelling
//! an accent-, width- or case-insensitive application would confuse.
//!
//! An application that finds accounts through MySQL's `*_ai_ci` collations, through NFKC and
//! case folding, or through a login form that strips invisible characters, acts on
//! `victim@example.com` when asked for `ｖｉｃｔｉｍ@example.com`, `vïctim@example.com`,
//! `vıctim@example.com` or `vic\u{200B}tim@example.com`. Keyed apart, each spelling would be a
//! fresh allowance against the victim's account. So account keys are compared by a skeleton:
//! NFKC, case-folded, default-ignorable characters and combining marks removed, confusable
//! characters mapped to their prototype (the UTS #39 skeleton). Two accounts that only look
//! alike share one key — the strict direction: they may be limited together, never apart.

use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;
use unicode_security::confusable_detection::skeleton;

/// The key text of an account name (`json:`/`form:` strings, `email(...)`, `user`): trimmed of
/// Unicode whitespace, then the skeleton described in the module docs. Equal for every spelling
/// an accent-, width- or case-insensitive comparison would call equal.
///
/// ```
/// use sluice_http::account::account_key;
/// let victim = account_key("victim@example.com");
/// for spelling in [
///     " Victim@Example.COM\u{a0}",       // case, Unicode whitespace (Python's str.strip)
///     "ｖｉｃｔｉｍ@ｅｘａｍｐｌｅ.ｃｏｍ", // fullwidth
///     "vi\u{308}ctim@example.com",        // a combining diaeresis
///     "v\u{ef}ctim@example.com",          // the precomposed ï
///     "v\u{131}ctim@example.com",         // dotless ı
///     "V\u{130}CTIM@EXAMPLE.COM",         // dotted İ
///     "vic\u{200b}tim@exam\u{200d}ple.com", // zero-width space and joiner
///     "vic\u{ad}tim@example.com",         // soft hyphen
/// ] {
///     assert_eq!(account_key(spelling), victim, "{spelling:?}");
/// }
/// assert_ne!(account_key("victor@example.com"), victim);
/// ```
pub fn account_key(text: &str) -> String {
    // A pass can yield characters a second pass folds further (`%` has the prototype `°/₀`,
    // whose `₀` NFKC reads as `0`): passes run until one changes nothing, so a key keys to
    // itself (a value some proxy already folded keys the same). Two passes settle every
    // input the property tests have found; four are allowed.
    let mut key = pass(text);
    for _ in 0..3 {
        let next = pass(&key);
        if next == key {
            break;
        }
        key = next;
    }
    key
}

/// One pass of [`account_key`]: trim, NFKC, case fold, skeleton, marks removed, lower case.
fn pass(text: &str) -> String {
    let trimmed = text.trim();
    // Plain lower-case ASCII letters, digits and the usual address punctuation map to
    // themselves except through the confusable table: the table still runs, but the
    // normalisation passes before it have nothing to do.
    let folded: String =
        if trimmed.is_ascii() { trimmed.to_ascii_lowercase() } else { trimmed.nfkc().flat_map(fold_case).collect() };
    skeleton(&folded).filter(|c| !is_combining_mark(*c)).flat_map(char::to_lowercase).collect()
}

/// Full case folding as far as it differs from lower-casing for account names: `ß` and `ẞ`
/// fold to `ss`, final sigma to sigma (what Python's `str.casefold` and ICU's folding do).
fn fold_case(c: char) -> impl Iterator<Item = char> {
    let special: Option<&'static str> = match c {
        'ß' | 'ẞ' => Some("ss"),
        'ς' => Some("σ"),
        _ => None,
    };
    let (one, many) = match special {
        Some(s) => (None, Some(s.chars())),
        None => (Some(c.to_lowercase()), None),
    };
    one.into_iter().flatten().chain(many.into_iter().flatten())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn folds_what_accent_and_width_insensitive_collations_fold() {
        assert_eq!(account_key("STRASSE"), account_key("straße"));
        assert_eq!(account_key("ΟΔΥΣΣΕΥΣ"), account_key("ὀδυσσεύς"));
        assert_eq!(account_key("ｂｏｂ"), account_key("bob"));
        assert_eq!(account_key("b\u{2060}ob"), account_key("bob"), "word joiner is default-ignorable");
        assert_eq!(account_key("bоb"), account_key("bob"), "Cyrillic о is confusable with o");
        assert_ne!(account_key("alice"), account_key("bob"));
        assert_eq!(account_key("   "), "");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(3000)))]

        /// Any text keys without a panic, and the key is a fixed point: keying a key changes
        /// nothing (so a value that was already folded by a proxy keys the same).
        #[test]
        fn any_text_keys_and_the_key_is_stable(text in "\\PC{0,24}") {
            let once = account_key(&text);
            prop_assert_eq!(account_key(&once), once.clone());
        }

        /// Case, width and invisible characters never split one account in two.
        #[test]
        fn spellings_an_insensitive_application_confuses_share_a_key(
            word in "[a-z]{1,12}", upper in any::<bool>(), wide in any::<bool>(), zw in 0usize..13,
        ) {
            let mut spelled: String = word
                .chars()
                .map(|c| {
                    let c = if upper { c.to_ascii_uppercase() } else { c };
                    if wide { char::from_u32(c as u32 - 0x20 + 0xFF00).unwrap() } else { c }
                })
                .collect();
            let at = zw.min(spelled.chars().count());
            let byte = spelled.char_indices().nth(at).map_or(spelled.len(), |(i, _)| i);
            spelled.insert(byte, '\u{200b}');
            prop_assert_eq!(account_key(&spelled), account_key(&word));
        }
    }
}
