//! Why a body that a route keys on is refused: the one list the body readers
//! ([`crate::body_key`], [`crate::form_body`]) answer with.

/// Why a body that a route keys on is refused: 415 for a content type the route does not read,
/// 400 otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyRefusal {
    /// The body is complete but not JSON.
    #[error("This route needs a JSON request body.")]
    NotJson,
    /// The body is complete but not a well-formed `application/x-www-form-urlencoded` form.
    #[error("This route needs a well-formed form body (application/x-www-form-urlencoded).")]
    NotForm,
    /// The content type is not the kind of body the route's key parts read (or there are
    /// several, or none with a body): an application would parse the body another way (415).
    #[error(
        "This route reads its limit key from the request body: send it with the content type the route expects (application/json, or application/x-www-form-urlencoded for a form)."
    )]
    ContentType,
    /// A field the route is limited by is also in the query string.
    #[error("A field this route is limited by may not also be in the query string.")]
    FieldInQuery,
    /// The keyed field is an array or an object, which an upstream might still coerce.
    #[error("A field this route is limited by must be a string or a number.")]
    NotScalar,
    /// An object on the way to a keyed field has the member twice, or a member whose name
    /// differs from it only by case (for forms: see [`crate::form_body::FormBody::field`]).
    #[error("A field this route is limited by is ambiguous: it appears twice, or in two spellings.")]
    Ambiguous,
    /// The body could not be read.
    #[error("The request body could not be read.")]
    Unreadable,
}

impl BodyRefusal {
    /// The status that answers it: 415 for [`BodyRefusal::ContentType`], 400 otherwise.
    pub fn status(self) -> http::StatusCode {
        match self {
            BodyRefusal::ContentType => http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            _ => http::StatusCode::BAD_REQUEST,
        }
    }
}
