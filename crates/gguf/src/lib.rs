//! anedvd-gguf: placeholder, filled in by its issue.
