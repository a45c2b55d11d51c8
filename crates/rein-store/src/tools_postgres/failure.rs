//! Errors of the Postgres tool store: each call collects its failure, then [`Redaction`]
//! scrubs the connection URL's password from the text before it becomes a
//! [`StoreError::Postgres`].

use deadpool_postgres::PoolError;

use crate::StoreError;

/// The passwords a connection URL carries (as written and decoded), to scrub from error text.
#[derive(Debug, Clone, Default)]
pub(super) struct Redaction {
    secrets: Vec<String>,
}

impl Redaction {
    /// The password as written in `postgres://user:password@host/...`. The last `@` ends it, so
    /// a password with an unescaped `@` or `/` is still found.
    pub(super) fn from_url(url: &str) -> Self {
        let written = url
            .split_once("://")
            .and_then(|(_, rest)| rest.rsplit_once('@'))
            .and_then(|(userinfo, _)| userinfo.split_once(':'))
            .map(|(_, password)| password.to_owned());
        let mut redaction = Self::default();
        redaction.add(written);
        redaction
    }

    pub(super) fn add(&mut self, secret: Option<String>) {
        if let Some(secret) = secret.filter(|secret| !secret.is_empty()) {
            self.secrets.push(secret);
            // Longest first, so a password that contains another is replaced whole.
            self.secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        }
    }

    pub(super) fn scrub(&self, text: &str) -> String {
        self.secrets.iter().fold(text.to_owned(), |text, secret| text.replace(secret, "***"))
    }
}

/// What went wrong inside a call, before its text is scrubbed.
#[derive(Debug)]
pub(crate) enum Failure {
    Postgres(String),
    Store(StoreError),
}

/// An error with its chain of causes (`tokio-postgres` puts the server's message in a cause).
pub(super) fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let next_text = next.to_string();
        if !text.contains(&next_text) {
            text.push_str(": ");
            text.push_str(&next_text);
        }
        cause = next.source();
    }
    text
}

impl From<tokio_postgres::Error> for Failure {
    fn from(error: tokio_postgres::Error) -> Self {
        Self::Postgres(describe(&error))
    }
}

impl From<PoolError> for Failure {
    fn from(error: PoolError) -> Self {
        Self::Postgres(describe(&error))
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Self::Store(error)
    }
}

pub(super) fn corrupt(what: String) -> Failure {
    Failure::Store(StoreError::Corrupt(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_scrubbed_however_the_url_writes_it() {
        for (url, password) in [
            ("postgres://rein:plain-pw@db:5432/rein", "plain-pw"),
            ("postgresql://rein:p%40ss@db/rein", "p%40ss"),
            ("postgres://rein:p@ss/w:rd@db/rein?sslmode=disable", "p@ss/w:rd"),
        ] {
            let redaction = Redaction::from_url(url);
            assert_eq!(redaction.scrub(&format!("failed near {password}!")), "failed near ***!");
        }
        assert!(Redaction::from_url("postgres://rein@db/rein").secrets.is_empty());
        assert!(Redaction::from_url("postgres://rein:@db/rein").secrets.is_empty());

        // The decoded form, which the connection config holds, is scrubbed as well.
        let mut redaction = Redaction::from_url("postgres://rein:p%40ss@db/rein");
        redaction.add(Some("p@ss".to_owned()));
        assert_eq!(redaction.scrub("p@ss and p%40ss"), "*** and ***");
    }
}
