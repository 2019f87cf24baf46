//! Key parts (`ip`, `header:NAME`, `json:/pointer`, `jwt:CLAIM`, `email(...)`...) and the
//! source of a limit's plan (`policy_by`).

use crate::model::*;

/// Parses one key part: sources separated by `|`, tried in order.
pub(crate) fn key_part(text: &str) -> Result<Vec<KeySource>, String> {
    text.split('|')
        .map(|s| {
            let s = s.trim();
            if let Some(inner) = s.strip_prefix("email(").and_then(|r| r.strip_suffix(')')) {
                let inner = key_part(inner)?;
                return match inner.as_slice() {
                    [
                        one @ (KeySource::Header(_)
                        | KeySource::Json(_)
                        | KeySource::Form(_)
                        | KeySource::User
                        | KeySource::Jwt(_)),
                    ] => Ok(KeySource::Email(Box::new(one.clone()))),
                    _ => Err(format!("`{s}`: email(...) takes one header:, json:, form:, jwt: or user part")),
                };
            }
            let (kind, arg) = s.split_once(':').unwrap_or((s, ""));
            let need_arg = |what: &str| {
                if arg.is_empty() { Err(format!("key part `{s}` needs {what}")) } else { Ok(arg.to_string()) }
            };
            match kind {
                "ip" => Ok(KeySource::Ip),
                "user" => Ok(KeySource::User),
                "method" => Ok(KeySource::Method),
                "path" => Ok(KeySource::Path),
                "route" => Ok(KeySource::Route),
                "header" => {
                    Ok(KeySource::Header(need_arg("a header name, like `header:x-api-key`")?.to_ascii_lowercase()))
                }
                "json" => {
                    let p = need_arg("a JSON pointer, like `json:/email`")?;
                    if !p.starts_with('/') {
                        return Err(format!("`{p}` is not a JSON pointer (it starts with `/`)"));
                    }
                    Ok(KeySource::Json(p))
                }
                "form" => {
                    let name = need_arg("a form field name, like `form:email`")?;
                    if name.bytes().any(|b| !b.is_ascii_graphic() || b"&=;%+".contains(&b)) {
                        return Err(format!(
                            "`{name}` is not a form field name (printable ASCII without `&`, `=`, `;`, `%` or `+`)"
                        ));
                    }
                    Ok(KeySource::Form(name))
                }
                "const" => Ok(KeySource::Const(need_arg("a value, like `const:global`")?)),
                "jwt" => Ok(KeySource::Jwt(claim_pointer(&need_arg("a claim, like `jwt:sub` or `jwt:/tenant/id`")?))),
                "tls" => match arg {
                    "san" => Ok(KeySource::Tls(TlsName::San)),
                    "subject" => Ok(KeySource::Tls(TlsName::Subject)),
                    _ => Err(format!("`{s}`: the client certificate's `tls:san` or `tls:subject`")),
                },
                other => Err(format!(
                    "unknown key part `{other}` (ip, header:NAME, user, json:/pointer, form:FIELD, jwt:CLAIM, method, \
                     path, route, const:VALUE, tls:san, tls:subject, email(...))"
                )),
            }
        })
        .collect()
}

/// The JSON pointer of a `jwt:` claim: `/...` as written, a bare name as the top-level member
/// of that name (`sub` is `/sub`; `~` and `/` in it escaped as RFC 6901 says).
fn claim_pointer(claim: &str) -> String {
    if claim.starts_with('/') { claim.to_owned() } else { format!("/{}", claim.replace('~', "~0").replace('/', "~1")) }
}

/// The source of `policy_by`: one source a client cannot set for itself. A header is believed
/// only from trusted proxies (so it needs some), as the user header is.
#[cfg(feature = "toml")]
pub(crate) fn plan_source(text: &str, server: &Server) -> Result<KeySource, String> {
    let chain = key_part(text)?;
    match chain.as_slice() {
        [by @ (KeySource::Jwt(_) | KeySource::User)] => Ok(by.clone()),
        [by @ KeySource::Header(_)] if server.trusted_proxies.is_empty() => Err(format!(
            "`{by}` is believed only from trusted proxies (a client must not choose its own quota): set \
             `server.trusted_proxies`, or read the plan from a verified token (`jwt:plan`)"
        )),
        [by @ KeySource::Header(_)] => Ok(by.clone()),
        _ => Err(format!(
            "`{text}`: the plan comes from one of jwt:CLAIM, user, or header:NAME (believed from trusted proxies only)"
        )),
    }
}
