//! A secret string: a password or a key a process connects with.

use std::fmt;

/// A secret string (a password, a key): kept out of `Debug` output, which prints
/// `<redacted>`, so a connection's options can be logged without it.
///
/// ```
/// use quorate_protocols::Secret;
///
/// let password = Secret::new("hunter2");
/// assert_eq!(format!("{password:?}"), "<redacted>");
/// assert_eq!(password.expose(), "hunter2");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    #[must_use]
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself: only for handing it to a client or a server's configuration.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}
