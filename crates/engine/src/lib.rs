//! anedvd-engine: placeholder, filled in by its issue.
