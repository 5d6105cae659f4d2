// Tokenizes many texts with one model load: reads texts separated by "\x1e\n"
// from stdin, prints one line per text: ids (add_special+parse_special) "|" ids (plain).
#include "llama.h"
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>
static std::string tok(const llama_vocab * v, const std::string & s, bool add, bool special) {
    std::vector<llama_token> out(s.size() * 4 + 16);
    int n = llama_tokenize(v, s.data(), (int) s.size(), out.data(), (int) out.size(), add, special);
    std::string r;
    for (int i = 0; i < n; i++) { if (i) r += ' '; r += std::to_string(out[i]); }
    return r;
}
int main(int argc, char ** argv) {
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * m = llama_model_load_from_file(argv[1], mp);
    if (!m) return 1;
    const llama_vocab * v = llama_model_get_vocab(m);
    std::stringstream ss; ss << std::cin.rdbuf();
    std::string all = ss.str(), sep = "\x1e\n";
    size_t pos = 0;
    while (pos < all.size()) {
        size_t next = all.find(sep, pos);
        if (next == std::string::npos) next = all.size();
        std::string s = all.substr(pos, next - pos);
        printf("%s|%s\n", tok(v, s, true, true).c_str(), tok(v, s, false, false).c_str());
        pos = next + sep.size();
    }
    return 0;
}
