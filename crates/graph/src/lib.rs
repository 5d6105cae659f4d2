//! anedvd-graph: placeholder, filled in by its issue.
