//! anedvd-model: placeholder, filled in by its issue.
