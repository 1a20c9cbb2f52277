//! What the command policy decides about a command.

/// The policy's decision about a command, least dangerous first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Run it only once a human approved it.
    NeedsApproval {
        /// Why, for the human and the model.
        reason: String,
    },
    /// Never run it.
    Refuse {
        /// Why, for the model.
        reason: String,
    },
}

impl Verdict {
    /// A `NeedsApproval` verdict.
    pub fn approval(reason: impl Into<String>) -> Self {
        Verdict::NeedsApproval {
            reason: reason.into(),
        }
    }

    /// A `Refuse` verdict.
    pub fn refuse(reason: impl Into<String>) -> Self {
        Verdict::Refuse {
            reason: reason.into(),
        }
    }

    /// True for `Allow`.
    pub fn is_allow(&self) -> bool {
        matches!(self, Verdict::Allow)
    }

    /// The reason, when there is one.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Verdict::Allow => None,
            Verdict::NeedsApproval { reason } | Verdict::Refuse { reason } => Some(reason),
        }
    }

    /// 0 for `Allow`, 1 for `NeedsApproval`, 2 for `Refuse`.
    fn severity(&self) -> u8 {
        match self {
            Verdict::Allow => 0,
            Verdict::NeedsApproval { .. } => 1,
            Verdict::Refuse { .. } => 2,
        }
    }

    /// The more dangerous of two verdicts; on a tie, `self` (the one found first).
    pub fn worst(self, other: Verdict) -> Verdict {
        if other.severity() > self.severity() {
            other
        } else {
            self
        }
    }
}
