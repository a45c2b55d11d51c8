//! Provider credentials: the one [`Secret`] type (`rein_core::Secret`), read in exactly one place,
//! when the adapter writes the authentication header (marked sensitive there too, so the HTTP
//! stack redacts it from its own debug output), and the [`Redactor`] that scrubs echoed keys
//! out of the failures a provider reports.

use std::fmt;

pub use rein_core::Secret;

/// Scrubs a provider's credentials out of the failures it reports. A misbehaving server or
/// proxy can echo the key back in an error body; the message must still never carry it.
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    needles: Vec<Secret>,
}

impl Redactor {
    /// Values shorter than this are not scrubbed: replacing every `a` in a message would hide
    /// the message, not a secret.
    const MIN_LEN: usize = 6;

    pub(crate) fn new<'a>(secrets: impl IntoIterator<Item = &'a Secret>) -> Self {
        let needles = secrets.into_iter().filter(|s| s.len() >= Self::MIN_LEN).cloned().collect();
        Self { needles }
    }

    pub(crate) fn text(&self, text: &mut String) {
        for needle in &self.needles {
            if text.contains(needle.expose()) {
                *text = text.replace(needle.expose(), "***");
            }
        }
    }

    pub(crate) fn failure(&self, mut failure: rein_core::Failure) -> rein_core::Failure {
        use rein_core::Failure;
        match &mut failure {
            Failure::Http { http, .. } => {
                self.text(&mut http.message);
                if let Some(code) = &mut http.code {
                    self.text(code);
                }
            }
            Failure::StreamError { message, .. } => self.text(message),
            Failure::Connection { detail }
            | Failure::LocalResources { detail }
            | Failure::Malformed { detail }
            | Failure::Unsendable { detail } => self.text(detail),
            Failure::ClockFired { .. } | Failure::StreamCut | Failure::ResponseTooLarge { .. } => {}
        }
        failure
    }
}

impl Redactor {}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Redactor({} secrets)", self.needles.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redactor_scrubs_echoed_keys_but_not_short_values() {
        let key = Secret::new("sk-live-123");
        let short = Secret::new("ab");
        let redactor = Redactor::new([&key, &short]);
        let mut text = "Incorrect API key provided: sk-live-123 (ab)".to_owned();
        redactor.text(&mut text);
        assert_eq!(text, "Incorrect API key provided: *** (ab)");
    }
}
