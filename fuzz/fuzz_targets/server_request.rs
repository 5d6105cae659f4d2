//! Decodes arbitrary bytes as a request body for one of the server's routes
//! (the first byte picks the route), exactly as the handler does before a
//! model is involved. Whatever is refused must be a client error (4xx) in
//! its dialect's error shape, never a panic or a 5xx.
#![no_main]

use anedvd_server::{decode_request, AppState, Dialect, ServerConfig};
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

const ROUTES: [&str; 7] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/tokenize",
    "/detokenize",
    "/chat/completions",
];

static STATE: LazyLock<AppState> = LazyLock::new(|| AppState::new(ServerConfig::default()));

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let path = ROUTES[pick as usize % ROUTES.len()];
    if let Err(e) = decode_request(&STATE, path, body) {
        assert!(e.status().is_client_error(), "{path}: {} {}", e.status(), e.message);
        assert_eq!(e.dialect, Dialect::of_path(path));
        let v = e.body();
        match e.dialect {
            Dialect::OpenAi => assert!(v["error"]["message"].is_string()),
            Dialect::Anthropic => {
                assert_eq!(v["type"], "error");
                assert!(v["error"]["message"].is_string());
            }
        }
    }
});
