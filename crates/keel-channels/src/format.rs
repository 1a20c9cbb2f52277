//! Replies formatted and split for each platform (being built: issue 33).
