//! The vocabulary of a config that does not hold: one [`ConfigProblem`] per key that is wrong,
//! with the fix in its message, collected by [`Problems`] so a check reports every problem at
//! once, never just the first, and handed back as one [`ConfigError`]. Every part of rein that
//! checks config (the runtime's reading of `rein.toml`, the tool dispatcher's ladders) speaks it.

use std::fmt;

/// One problem in a config, at one key (`routes.support.tiers[0].provider`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}", self.key, self.message)
    }
}

/// Every problem found in a config, not just the first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub problems: Vec<ConfigProblem>,
}

impl ConfigError {
    /// An error of one problem.
    pub fn single(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self { problems: vec![ConfigProblem { key: key.into(), message: message.into() }] }
    }

    /// Whether some problem is at `key`.
    pub fn names(&self, key: &str) -> bool {
        self.problems.iter().any(|p| p.key == key)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.problems.len();
        writeln!(f, "the config has {count} problem{}:", if count == 1 { "" } else { "s" })?;
        for problem in &self.problems {
            writeln!(f, "  - {problem}")?;
        }
        Ok(())
    }
}

/// The problems found so far by a check.
#[derive(Debug, Default)]
pub struct Problems(Vec<ConfigProblem>);

impl Problems {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigProblem { key: key.into(), message: message.into() });
    }

    /// How many so far: a check compares before and after a part to know whether it held.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The keys so far, in order.
    pub fn keys(&self) -> Vec<String> {
        self.0.iter().map(|p| p.key.clone()).collect()
    }

    /// The messages so far, in order.
    pub fn messages(&self) -> Vec<String> {
        self.0.iter().map(|p| p.message.clone()).collect()
    }

    /// Every problem as one error (after a problem that ends the check).
    pub fn into_error(self) -> ConfigError {
        ConfigError { problems: self.0 }
    }

    /// `Ok` when nothing was found, else every problem as one error.
    pub fn into_result(self) -> Result<(), ConfigError> {
        if self.0.is_empty() { Ok(()) } else { Err(ConfigError { problems: self.0 }) }
    }
}

impl Extend<ConfigProblem> for Problems {
    fn extend<T: IntoIterator<Item = ConfigProblem>>(&mut self, iter: T) {
        self.0.extend(iter);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]

    use super::*;

    #[test]
    fn every_problem_is_kept_and_printed_by_key() {
        let mut problems = Problems::new();
        assert!(problems.is_empty());
        assert_eq!(Problems::new().into_result(), Ok(()));
        problems.add("server.listen", "not an address");
        problems.extend([ConfigProblem { key: "tools.x".into(), message: "unknown".into() }]);
        assert_eq!(problems.len(), 2);
        assert_eq!(problems.keys(), ["server.listen", "tools.x"]);
        let Err(error) = problems.into_result() else { panic!("two problems") };
        assert!(error.names("tools.x") && !error.names("tools"));
        assert_eq!(
            error.to_string(),
            "the config has 2 problems:\n  - `server.listen`: not an address\n  - `tools.x`: unknown\n"
        );
        assert_eq!(
            ConfigError::single("a", "b").to_string(),
            "the config has 1 problem:\n  - `a`: b\n"
        );
    }
}
