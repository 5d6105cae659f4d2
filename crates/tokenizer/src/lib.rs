//! anedvd-tokenizer: placeholder, filled in by its issue.
