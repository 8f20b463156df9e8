//! placeholder, filled by the crate's first commit
