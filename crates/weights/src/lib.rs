//! anedvd-weights: placeholder, filled in by its issue.
