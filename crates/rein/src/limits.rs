//! Process limits a long-running server needs: the open-file limit. Every client connection and
//! every upstream connection is a file descriptor, and the soft limit most shells start a process
//! with (1,024) caps a gateway far below what its memory allows, while the hard limit is usually
//! much higher. `rein serve` and `rein sim` raise the soft limit to the hard one at start, as
//! nginx's `worker_rlimit_nofile` and most servers do; they never touch the hard limit.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The open-file limit before and after [`raise_open_files`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenFiles {
    pub(crate) before: u64,
    pub(crate) after: u64,
}

/// Raise this process's soft open-file limit to its hard limit. A failure is logged and leaves
/// the limit as it was: the server still runs, only with fewer connections.
pub(crate) fn raise_open_files() -> Option<OpenFiles> {
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(error) => {
            tracing::warn!("cannot read the open-file limit: {error}");
            return None;
        }
    };
    if soft >= hard {
        return Some(OpenFiles { before: soft, after: soft });
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => {
            tracing::debug!(from = soft, to = hard, "raised the open-file limit");
            Some(OpenFiles { before: soft, after: hard })
        }
        Err(error) => {
            tracing::warn!(soft, hard, "cannot raise the open-file limit: {error}");
            Some(OpenFiles { before: soft, after: soft })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_soft_open_file_limit_is_raised_to_the_hard_one() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        // Start from a lower soft limit, as a login shell gives, so the raise has work to do
        // (not so low that tests running beside this one run out of descriptors).
        let low = hard / 2;
        setrlimit(Resource::RLIMIT_NOFILE, low, hard).unwrap();
        let raised = raise_open_files().unwrap();
        assert_eq!(raised, OpenFiles { before: low, after: hard });
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
        // Already at the hard limit: nothing to do.
        assert_eq!(raise_open_files().unwrap(), OpenFiles { before: hard, after: hard });
    }
}
