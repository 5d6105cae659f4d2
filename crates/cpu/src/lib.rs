//! anedvd-cpu: placeholder, filled in by its issue.
