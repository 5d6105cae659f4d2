//! anedvd-quant: placeholder, filled in by its issue.
