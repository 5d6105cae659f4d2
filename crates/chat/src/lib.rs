//! anedvd-chat: placeholder, filled in by its issue.
